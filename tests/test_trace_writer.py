"""TraceWriter: one write per record, torn-tail healing, recordable filter, threads."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

from omni_grpc import protocol as p
from omni_grpc.convert import message_from_dict
from omni_grpc.trace import SkippedLine, TraceWriter, read_jsonl

CORPUS = Path(__file__).parent / "conformance"


def test_heals_a_torn_tail_exactly_like_the_reference(tmp_path: Path) -> None:
    shard = tmp_path / "trace_001.jsonl"
    shutil.copy(CORPUS / "trace_torn_tail_before_resume_001.jsonl", shard)
    writer = TraceWriter(shard)
    resumed = p.user_text("resumed input", timestamp="2026-08-22T09:00:00.050Z")
    assert writer.write(message_from_dict(resumed)) is True
    assert shard.read_bytes() == (CORPUS / "trace_torn_tail_healed_001.jsonl").read_bytes()

    skipped: list[SkippedLine] = []
    records = list(read_jsonl(shard, tolerant=True, on_skip=skipped.append))
    assert len(records) == 6
    assert [s.line for s in skipped] == [6] and not skipped[0].last


def test_no_prefix_for_a_clean_or_missing_file(tmp_path: Path) -> None:
    shard = tmp_path / "2026-08-22" / "s_001.jsonl"  # the date directory is created
    writer = TraceWriter(shard)
    assert writer.write(message_from_dict(p.request_begin(timestamp="t1")))
    second = TraceWriter(shard)  # a new writer on a file ending in \n
    assert second.write(message_from_dict(p.request_begin(timestamp="t2")))
    assert shard.read_bytes() == (
        b'{"timestamp":"t1","type":"event_msg","payload":{"type":"request_begin"}}\n'
        b'{"timestamp":"t2","type":"event_msg","payload":{"type":"request_begin"}}\n'
    )


def test_only_recordable_messages_are_written(tmp_path: Path) -> None:
    shard = tmp_path / "s_001.jsonl"
    writer = TraceWriter(shard)
    assert writer.write(message_from_dict(p.partial_text("delta", "x"))) is False
    assert writer.write(message_from_dict(p.with_origin(p.user_text("x"), "child"))) is False
    assert not shard.exists()


def test_rotate_moves_to_the_next_shard(tmp_path: Path) -> None:
    writer = TraceWriter(tmp_path / "session-x_001.jsonl")
    assert writer.rotate() == tmp_path / "session-x_002.jsonl"
    writer.write(message_from_dict(p.request_begin(timestamp="t")))
    assert (tmp_path / "session-x_002.jsonl").exists()


def test_concurrent_writers_never_interleave(tmp_path: Path) -> None:
    shard = tmp_path / "s_001.jsonl"
    writers = [TraceWriter(shard), TraceWriter(shard)]  # two handles, one file
    per_thread = 200

    def work(n: int) -> None:
        for i in range(per_thread):
            # Sizes from tiny to ~300 KB, past any pipe/page buffering size.
            text = f"{n}:{i}:" + "x" * ((i * 7919 + n * 104729) % 300_000)
            msg = p.assistant_text(text, timestamp="2026-01-01T00:00:00.000Z")
            writers[n % 2].write(message_from_dict(msg))

    threads = [threading.Thread(target=work, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seen = set()
    for line in shard.read_bytes().split(b"\n")[:-1]:
        text = json.loads(line)["payload"]["text"]
        n, i, filler = text.split(":", 2)
        assert filler == "x" * len(filler)
        seen.add((int(n), int(i)))
    assert len(seen) == 6 * per_thread


PARTIAL_WRITE = r"""
import resource, signal, sys
from omni_grpc import protocol as p
from omni_grpc.convert import message_from_dict
from omni_grpc.trace import TraceWriter

signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
path = sys.argv[1]
writer = TraceWriter(path)
writer.write(message_from_dict(p.user_text("a", timestamp="t0")))
soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
# The next record crosses the file size limit: the kernel writes part of it.
resource.setrlimit(resource.RLIMIT_FSIZE, (200, hard))
try:
    writer.write(message_from_dict(p.assistant_text("b" * 500, timestamp="t1")))
except OSError as exc:
    print("failed:", exc)
resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
writer.write(message_from_dict(p.user_text("c", timestamp="t2")))
"""


def test_a_partial_write_is_taken_back(tmp_path: Path) -> None:
    shard = tmp_path / "s_001.jsonl"
    run = subprocess.run(
        [sys.executable, "-c", PARTIAL_WRITE, str(shard)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert "short write" in run.stdout
    # The kernel wrote part of the record; the writer cut it off again, so the
    # failure leaves no torn line behind (not even one a reader would skip).
    skipped: list[SkippedLine] = []
    texts = [r.message.text.text for r in read_jsonl(shard, tolerant=True, on_skip=skipped.append)]
    assert texts == ["a", "c"]
    assert skipped == []
    assert shard.read_bytes().count(b"\n") == 2


def test_write_takes_the_line_a_caller_already_serialized(tmp_path: Path) -> None:
    from omni_grpc.convert import parse_message, serialize_message

    line = b'{"timestamp":"t","type":"event_msg","payload":{"type":"request_begin"}}'
    message = parse_message(line)
    writer = TraceWriter(tmp_path / "s_001.jsonl")
    assert writer.write(message, serialize_message(message))
    partial = parse_message(
        b'{"timestamp":"t","type":"model_msg","payload":{"type":"partial_text","role":"assistant",'
        b'"event_type":"start","text":"","stop_reason":"completed"}}'
    )
    assert not writer.write(partial, serialize_message(partial))  # still not recordable
    assert (tmp_path / "s_001.jsonl").read_bytes() == line + b"\n"
