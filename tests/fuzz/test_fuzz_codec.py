"""A short, bounded atheris session over the codec, seeded with the
conformance corpus (JSONL) and a .binpb of it: it must find nothing.

The run is bounded by a number of inputs and a fixed seed, not by time, so
it does the same work on every machine. Longer sessions: see fuzz_codec.py.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from omni_grpc.convert import parse_message
from omni_grpc.trace import write_binpb

from . import default_form

HERE = Path(__file__).parent
CORPUS = HERE.parent / "conformance"
RUNS = 20_000


def seeds(into: Path) -> None:
    lines: list[bytes] = []
    for n, path in enumerate(sorted(CORPUS.glob("*.jsonl"))):
        data = path.read_bytes()
        (into / f"jsonl-{n}").write_bytes(data[:8192])
        lines += data.splitlines()
    sink = io.BytesIO()
    messages = []
    for line in lines:
        try:
            messages.append(parse_message(line))
        except ValueError:
            continue
    write_binpb(messages[:40], sink)
    (into / "trace.binpb").write_bytes(sink.getvalue())
    # Large records, which a .binpb stores compressed (zlib_record).
    large = [m for m in messages if m.ByteSize() >= 256][:8]
    packed = io.BytesIO()
    write_binpb(large, packed, compress=True)
    (into / "compressed.binpb").write_bytes(packed.getvalue()[:16384])
    for n, line in enumerate(lines[:60]):
        (into / f"line-{n}").write_bytes(line)
    # Issue 28's classes: odd envelope types, number spellings JavaScript
    # never writes, a tool schema and fidelity holding them.
    for n, line in enumerate(ODD_LINES):
        (into / f"odd-{n}").write_bytes(line)
    # The default .binpb form: base64 stored as bytes, tool lists marked.
    for n, line in enumerate(default_form.LINES):
        (into / f"default-form-{n}").write_bytes(line)
    for name, data in default_form.frames().items():
        (into / name).write_bytes(data)


ODD_LINES = [
    b'{"timestamp":"t","type":"","payload":{"type":"future"}}',
    b'{"timestamp":"t","type":"x","payload":{"type":""}}',
    b'{"timestamp":"t","type":"event_msg","payload":{"type":"compaction_begin",'
    b'"reason":"context","mode":"summarize","context":1.0,"turns":-0}}',
    b'{"timestamp":"t","type":"model_msg","payload":{"type":"text","role":"assistant",'
    b'"text":"x","fidelity":{"id":"r","encrypted_content":-0.0,"n":1.0}}}',
    b'{"timestamp":"t","type":"event_msg","payload":{"type":"tool_list_ready","tools":'
    b'[{"name":"n","description":"d","parameters":{"max":1.0,"min":-0.0,"e":1e2}}]}}',
]


def test_a_bounded_fuzzing_session_finds_nothing(tmp_path: Path) -> None:
    try:
        import atheris  # noqa: F401
    except ImportError:
        if os.environ.get("OMNI_REQUIRE_TOOLCHAINS") == "1":
            pytest.fail("atheris is missing (scripts/setup installs the dev extras)")
        pytest.skip("atheris is not installed")
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    seeds(corpus)
    done = subprocess.run(
        [
            sys.executable,
            str(HERE / "fuzz_codec.py"),
            f"-runs={RUNS}",
            "-seed=1",
            "-max_len=8192",
            f"-artifact_prefix={tmp_path}/",
            str(corpus),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    report = done.stderr[-4000:]
    assert done.returncode == 0, report
    assert f"Done {RUNS} runs" in done.stderr, report
    assert not list(tmp_path.glob("crash-*")), report
