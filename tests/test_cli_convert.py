"""``omni-grpc convert`` run as a real process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from google.protobuf.internal.decoder import _DecodeVarint

CORPUS = Path(__file__).parent / "conformance"
CLI = str(Path(sys.executable).with_name("omni-grpc"))
CLEAN = sorted(
    f for f in CORPUS.glob("*.jsonl") if "torn" not in f.name and not f.name.startswith("docs_")
)


def cli(*args: str | Path, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [CLI, *map(str, args)], input=stdin, capture_output=True, timeout=120, check=False
    )


def corpus_bytes() -> bytes:
    return b"".join(f.read_bytes() for f in CLEAN)


def test_jsonl_binpb_jsonl_round_trip_of_the_whole_corpus(tmp_path: Path) -> None:
    source = tmp_path / "all.jsonl"
    source.write_bytes(corpus_bytes())
    done = cli("convert", source, tmp_path / "all.binpb")
    assert (done.returncode, done.stderr) == (0, b"")
    done = cli("convert", tmp_path / "all.binpb", tmp_path / "back.ndjson")
    assert done.returncode == 0
    assert (tmp_path / "back.ndjson").read_bytes() == source.read_bytes()
    assert (tmp_path / "all.binpb").stat().st_size < source.stat().st_size


def test_stdin_and_stdout_need_explicit_formats(tmp_path: Path) -> None:
    data = corpus_bytes()
    binpb = cli("convert", "--from", "jsonl", "--to", "binpb", "-", "-", stdin=data)
    assert binpb.returncode == 0 and binpb.stdout
    back = cli("convert", "--from", "binpb", "-", "-", "--to", "jsonl", stdin=binpb.stdout)
    assert back.returncode == 0 and back.stdout == data

    missing = cli("convert", "-", tmp_path / "x.binpb", stdin=data)
    assert missing.returncode == 2 and b"--from" in missing.stderr
    assert not (tmp_path / "x.binpb").exists()


def test_strict_data_error_names_the_line_and_leaves_no_output(tmp_path: Path) -> None:
    out = tmp_path / "healed.binpb"
    done = cli("convert", CORPUS / "trace_torn_tail_healed_001.jsonl", out)
    assert done.returncode == 1
    assert b"line 6:" in done.stderr
    assert os.listdir(tmp_path) == []  # no output, no temp file


def test_a_failure_keeps_an_existing_output_intact(tmp_path: Path) -> None:
    out = tmp_path / "keep.binpb"
    out.write_bytes(b"previous")
    done = cli("convert", CORPUS / "trace_torn_tail_healed_001.jsonl", out)
    assert done.returncode == 1
    assert out.read_bytes() == b"previous"
    assert os.listdir(tmp_path) == ["keep.binpb"]


def test_tolerant_reports_skips_on_stderr(tmp_path: Path) -> None:
    out = tmp_path / "healed.jsonl"
    done = cli("convert", "--tolerant", CORPUS / "trace_torn_tail_healed_001.jsonl", out)
    assert done.returncode == 0
    assert b"line 6: malformed line skipped" in done.stderr
    assert len(out.read_bytes().splitlines()) == 6

    done = cli("convert", "--tolerant", CORPUS / "trace_torn_tail_before_resume_001.jsonl", out)
    assert done.returncode == 0
    assert b"line 6: torn last line ignored" in done.stderr


def test_truncated_binpb_names_record_and_offset(tmp_path: Path) -> None:
    full = cli("convert", "--to", "binpb", CORPUS / "trace_basic_tool_turn_001.jsonl", "-")
    torn = tmp_path / "torn.binpb"
    torn.write_bytes(full.stdout[:-3])
    done = cli("convert", torn, tmp_path / "out.jsonl")
    assert done.returncode == 1
    assert b"record 15 at byte offset" in done.stderr and b"truncated frame" in done.stderr
    assert not (tmp_path / "out.jsonl").exists()


@pytest.mark.parametrize(
    "args",
    [
        ("convert", "in.txt", "out.binpb"),  # unknown input extension
        ("convert", "in.jsonl", "out.json"),  # unknown output extension
        ("convert", "--from", "xml", "in.jsonl", "out.binpb"),  # argparse choice
        ("convert", "only-one.jsonl"),  # argparse arity
        ("convert", "--tolerant", "in.binpb", "out.jsonl"),
    ],
)
def test_usage_errors_exit_2(tmp_path: Path, args: tuple[str, ...]) -> None:
    for name in ("in.txt", "in.jsonl", "in.binpb"):
        (tmp_path / name).write_bytes(b"")
    done = subprocess.run([CLI, *args], cwd=tmp_path, capture_output=True, timeout=60, check=False)
    assert done.returncode == 2, done.stderr


def test_missing_input_is_a_usage_error(tmp_path: Path) -> None:
    done = cli("convert", tmp_path / "nope.jsonl", tmp_path / "out.binpb")
    assert done.returncode == 2 and b"cannot read" in done.stderr


def test_no_progress_bar_when_stderr_is_not_a_terminal(tmp_path: Path) -> None:
    big = tmp_path / "big.jsonl"
    with big.open("wb") as f:
        chunk = corpus_bytes()
        for _ in range(17 * 1024 * 1024 // len(chunk) + 1):
            f.write(chunk)
    done = cli("convert", big, tmp_path / "big.binpb")
    assert (done.returncode, done.stderr) == (0, b"")


def test_forced_progress_bar_goes_to_stderr_only(tmp_path: Path) -> None:
    done = cli("convert", "--progress", "always", CLEAN[0], "-", "--to", "jsonl")
    assert done.returncode == 0
    assert done.stdout == CLEAN[0].read_bytes()


def test_a_closed_stdout_ends_the_conversion_quietly(tmp_path: Path) -> None:
    source = tmp_path / "many.jsonl"
    source.write_bytes(corpus_bytes() * 20)  # well past a pipe's buffer
    read_end, write_end = os.pipe()
    os.close(read_end)  # as `| head` does once it has its lines
    try:
        done = subprocess.run(
            [CLI, "convert", str(source), "-", "--to", "binpb"],
            stdout=write_end,
            stderr=subprocess.PIPE,
            timeout=120,
            check=False,
        )
    finally:
        os.close(write_end)
    # 128 + SIGPIPE, as a shell reports for a tool the signal ended; no traceback.
    assert (done.returncode, done.stderr) == (141, b"")


def test_a_bad_frame_is_named_once_whatever_the_output(tmp_path: Path) -> None:
    """The reader names a bad frame; the writer must not name it again as
    the record it was writing ("record 14: record 15 at byte offset")."""
    full = cli("convert", "--to", "binpb", CORPUS / "trace_basic_tool_turn_001.jsonl", "-")
    torn = tmp_path / "torn.binpb"
    torn.write_bytes(full.stdout[:-3])
    for out in ("out.jsonl", "out.binpb"):
        done = cli("convert", torn, tmp_path / out)
        assert done.returncode == 1
        message = done.stderr.decode()
        assert f"{torn}: record 15 at byte offset" in message, message
        assert message.count("record ") == 1, message


def test_what_convert_accepts_it_converts_back_and_validate_agrees(tmp_path: Path) -> None:
    """Issue 28: an unknown payload in an envelope of empty type went to
    .binpb but not back. Each line is either converted both ways byte for
    byte (and valid for ``validate``) or refused by convert and called
    malformed by validate, never one without the other."""
    lines = [
        b'{"timestamp":"t","type":"","payload":{"type":"future"}}',
        b'{"timestamp":"t","type":"future_msg","payload":{"type":"future","x":1}}',
        b'{"timestamp":"t","type":"model_msg","payload":{"type":"","x":[]}}',
        # the default .binpb form: base64 stored as bytes, a tool list marked
        b'{"timestamp":"t","type":"model_msg","payload":{"type":"thinking","role":"assistant",'
        b'"thinking":"","fidelity":{"id":"r","encrypted_content":"' + b"QUJD" * 64 + b'"}}}',
        b'{"timestamp":"t","type":"event_msg","payload":{"type":"tool_list_ready","tools":['
        + b",".join(
            b'{"name":"t%d","description":"d","parameters":{"type":"object"}}' % i
            for i in range(40)  # over MARK_FROM (1 KiB): a smaller one stays plain
        )
        + b"]}}",
    ]
    for n, line in enumerate(lines):
        source = tmp_path / f"{n}.jsonl"
        source.write_bytes(line + b"\n")
        forward = cli("convert", source, tmp_path / f"{n}.binpb")
        valid = cli("validate", "--stream", source)
        if forward.returncode == 0:
            back = cli("convert", tmp_path / f"{n}.binpb", tmp_path / f"{n}.back.jsonl")
            assert back.returncode == 0, back.stderr
            assert (tmp_path / f"{n}.back.jsonl").read_bytes() == line + b"\n"
            assert b"malformed" not in valid.stdout
            stored = cli("validate", "--stream", tmp_path / f"{n}.binpb")
            assert stored.returncode == valid.returncode and b"malformed" not in stored.stdout
        else:
            assert forward.returncode == 1 and b"line 1" in forward.stderr
            assert valid.returncode == 1 and b"malformed" in valid.stdout
    # the last two were stored in the default form: base64 as bytes, marked
    assert b"QUJD" * 64 not in (tmp_path / "3.binpb").read_bytes()
    marked = (tmp_path / "4.binpb").read_bytes()
    _, start = _DecodeVarint(marked, 0)  # the record's length
    assert marked[start : start + 1] == b"\x00"
    refused = cli("convert", tmp_path / "0.jsonl", tmp_path / "z.binpb")
    assert b"envelope type is empty" in refused.stderr
