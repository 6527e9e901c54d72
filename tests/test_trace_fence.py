"""The trace's half of the journal's fencing (#25, #41): each append on a
shared backend carries its record number and is refused in the append's own
lock unless the trace holds the records before it. A take-over's close is
numbered past what it read, so a stale owner's append is refused even when
its lease still looks valid by its own clock (an owner paused between that
check and its write); no fence file, no token on the file system."""

from __future__ import annotations

import dataclasses
import math
import subprocess
import sys
import time
from pathlib import Path

import pytest

from omni_grpc import protocol as p
from omni_grpc.convert import message_from_dict
from omni_grpc.engines.base import AbortSignal
from omni_grpc.engines.demo import DemoEngine
from omni_grpc.runtime.approvals import ApprovalBroker
from omni_grpc.runtime.backend import memory_backend
from omni_grpc.runtime.errors import Fenced
from omni_grpc.runtime.health import HealthState
from omni_grpc.runtime.recorder import Recorder
from omni_grpc.runtime.run import Run
from omni_grpc.runtime.run_lease import Lease
from omni_grpc.runtime.session_index import SessionRecord
from omni_grpc.runtime.trace_store import TraceStore
from omni_grpc.trace import StaleWriter, TraceWriter, read_jsonl

WAIT = 120.0  # bounds a hang only


def begin(stamp: str) -> object:
    return message_from_dict(p.request_begin(timestamp=stamp))


def test_a_number_that_does_not_follow_the_shard_is_refused(tmp_path: Path) -> None:
    shard = tmp_path / "2026-12-05" / "s_001.jsonl"
    owner, taker = TraceWriter(shard), TraceWriter(shard)
    assert owner.write(begin("t1"), number=1)  # type: ignore[arg-type]
    assert owner.write(begin("t2"), number=2)  # type: ignore[arg-type]
    # The taker (another writer: it counts the shard through its index).
    assert taker.write(begin("t3"), number=3)  # type: ignore[arg-type]
    before = shard.read_bytes()
    for wrong in (3, 5, 1):  # the owner's next as it believes it, a gap, far back
        with pytest.raises(StaleWriter) as refused:
            owner.write(begin("late"), number=wrong)  # type: ignore[arg-type]
        assert (refused.value.number, refused.value.held) == (wrong, 3)
    assert shard.read_bytes() == before  # nothing of the refused records
    assert owner.write(begin("t4"), number=4)  # type: ignore[arg-type]
    # An unnumbered writer (one process, the memory backend) is not concerned.
    assert TraceWriter(shard).write(begin("t5"))  # type: ignore[arg-type]
    assert [r.message.timestamp for r in read_jsonl(shard)] == ["t1", "t2", "t3", "t4", "t5"]
    # A torn tail is no record: the next number follows the whole ones.
    with shard.open("ab") as fh:
        fh.write(b'{"timestamp":"to')
    assert TraceWriter(shard).write(begin("t6"), number=6)  # type: ignore[arg-type]


CHILD = """
import sys
from omni_grpc import protocol as p
from omni_grpc.convert import message_from_dict, serialize_message
from omni_grpc.trace import StaleWriter, TraceWriter
writer = TraceWriter(sys.argv[1])
written = 0
try:
    while True:
        msg = message_from_dict(p.request_begin(timestamp=f"n{written}"))
        writer.write(msg, number=written + 1)
        written += 1
except StaleWriter:
    print(written, flush=True)
"""


def test_no_record_of_a_writer_numbered_past_lands_after_across_processes(
    tmp_path: Path,
) -> None:
    """Another process appends as fast as it can, numbering its records; once
    it has written, this one appends its own next number in the same race (a
    take-over's close): whichever lands first, the other's record with that
    number is refused, and nothing of the child lands after this one's."""
    shard = tmp_path / "2026-12-05" / "s_001.jsonl"
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(shard)], stdout=subprocess.PIPE, text=True
    )
    taker = TraceWriter(shard)
    try:
        deadline = time.monotonic() + WAIT
        while not (shard.exists() and shard.read_bytes().count(b"\n") >= 50):
            assert child.poll() is None and time.monotonic() < deadline
            time.sleep(0.01)
        while True:  # the closer reads the trace, then numbers its close past it
            held = sum(1 for _ in read_jsonl(shard))
            try:
                taker.write(begin("close"), number=held + 1)  # type: ignore[arg-type]
                break
            except StaleWriter:
                continue  # the child's record landed first: read again
        at_close = shard.read_bytes()
        out, _ = child.communicate(timeout=WAIT)
    finally:
        child.kill()
    assert child.returncode == 0
    assert shard.read_bytes() == at_close
    written = int(out)
    stamps = [r.message.timestamp for r in read_jsonl(shard)]
    assert stamps == [f"n{i}" for i in range(written)] + ["close"]


async def test_a_stale_owner_whose_lease_still_looks_valid_writes_nothing(
    tmp_path: Path,
) -> None:
    """The recorder's lease check passes (the owner's clock says its lease is
    valid: it was paused right after the check, say), but another replica
    took the run over and numbered its close past the owner's records: the
    append is refused, the run is marked lost, and the trace is unchanged."""
    data = tmp_path / "data"
    backend = dataclasses.replace(memory_backend(), shared=True)
    owner_store, taker_store = TraceStore(data), TraceStore(data)
    session_id = "session-2026-12-05-00-00-00-0000abcd"
    record = SessionRecord(session_id, "t0", "t0", 0, (owner_store.new_shard(session_id),))
    recorder = Recorder(DemoEngine(), owner_store, backend, HealthState())
    lease = Lease(session_id, "owner", 1, math.inf)  # valid by its own clock, always
    run = Run(
        record, lease, backend.logs.get(session_id), AbortSignal(), ApprovalBroker(session_id)
    )
    assert await recorder.append(run, begin("t1"))  # type: ignore[arg-type]
    # The take-over, on another replica: it read the trace (one record) and
    # records its close after it.
    taker = Run(
        dataclasses.replace(record, message_count=1), dataclasses.replace(lease, token=2),
        run.log, AbortSignal(), ApprovalBroker(session_id),
    )  # fmt: skip
    taker_recorder = Recorder(DemoEngine(), taker_store, backend, HealthState())
    assert await taker_recorder.append(taker, begin("t3"))  # type: ignore[arg-type]
    shard = owner_store.paths(record)[-1]
    before = shard.read_bytes()
    with pytest.raises(Fenced):
        await recorder.append(run, begin("t2"))  # type: ignore[arg-type]
    assert run.lost
    assert shard.read_bytes() == before
    assert [r.message.timestamp for r in read_jsonl(shard)] == ["t1", "t3"]
