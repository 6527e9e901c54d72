"""The trace's storage-level fence (#25): a take-over raises the shard's
fence, and a stale owner's append is refused in the append's own lock, even
when its lease still looks valid by its own clock (the gap the lease's local
check alone left: an owner paused between that check and its write)."""

from __future__ import annotations

import dataclasses
import math
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from omni_grpc import protocol as p
from omni_grpc.convert import message_from_dict, serialize_message
from omni_grpc.engines.base import AbortSignal
from omni_grpc.engines.demo import DemoEngine
from omni_grpc.runtime.approvals import ApprovalBroker
from omni_grpc.runtime.backend import Backend, memory_backend
from omni_grpc.runtime.errors import Fenced
from omni_grpc.runtime.health import HealthState
from omni_grpc.runtime.recorder import Recorder
from omni_grpc.runtime.recovery import Recovery
from omni_grpc.runtime.run import Run
from omni_grpc.runtime.run_lease import Lease
from omni_grpc.runtime.session_index import SessionRecord
from omni_grpc.runtime.trace_store import TraceStore
from omni_grpc.trace import StaleWriter, TraceWriter, read_jsonl

WAIT = 120.0  # bounds a hang only


def begin(stamp: str) -> object:
    return message_from_dict(p.request_begin(timestamp=stamp))


def test_a_raised_fence_refuses_older_tokens_only(tmp_path: Path) -> None:
    shard = tmp_path / "2026-12-05" / "s_001.jsonl"
    owner, taker, later = TraceWriter(shard), TraceWriter(shard), TraceWriter(shard)
    assert owner.write(begin("t1"), fence=1)  # type: ignore[arg-type]
    taker.raise_fence(2)
    before = shard.read_bytes()
    with pytest.raises(StaleWriter) as refused:
        owner.write(begin("t2"), fence=1)  # type: ignore[arg-type]
    assert (refused.value.token, refused.value.fence) == (1, 2)
    assert shard.read_bytes() == before  # nothing of the refused record
    assert taker.write(begin("t3"), fence=2)  # type: ignore[arg-type]
    assert later.write(begin("t4"), fence=3)  # type: ignore[arg-type]  # the next run
    taker.raise_fence(1)  # never lowered
    with pytest.raises(StaleWriter):
        owner.write(begin("t5"), fence=1)  # type: ignore[arg-type]
    assert [r.message.timestamp for r in read_jsonl(shard)] == ["t1", "t3", "t4"]
    # An unfenced writer (one process, the memory backend) is not concerned.
    assert TraceWriter(shard).write(begin("t6"))  # type: ignore[arg-type]


CHILD = """
import sys
from omni_grpc import protocol as p
from omni_grpc.convert import message_from_dict, serialize_message
from omni_grpc.trace import StaleWriter, TraceWriter
writer = TraceWriter(sys.argv[1])
written = 0
try:
    while True:
        writer.write(message_from_dict(p.request_begin(timestamp=f"n{written}")), fence=1)
        written += 1
except StaleWriter:
    print(written, flush=True)
"""


def test_no_record_of_a_fenced_writer_lands_after_the_fence_across_processes(
    tmp_path: Path,
) -> None:
    """Another process appends as fast as it can with token 1; once it has
    written, this one raises the fence to 2. What the file holds when
    ``raise_fence`` returns is what it holds at the end: the writer's next
    append, wherever it was (checked, or about to be), is refused."""
    shard = tmp_path / "2026-12-05" / "s_001.jsonl"
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(shard)], stdout=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + WAIT
        while not (shard.exists() and shard.read_bytes().count(b"\n") >= 50):
            assert child.poll() is None and time.monotonic() < deadline
            time.sleep(0.01)
        TraceWriter(shard).raise_fence(2)
        at_fence = shard.read_bytes()
        out, _ = child.communicate(timeout=WAIT)
    finally:
        child.kill()
    assert child.returncode == 0
    assert shard.read_bytes() == at_fence
    written = int(out)
    assert [r.message.timestamp for r in read_jsonl(shard)] == [f"n{i}" for i in range(written)]


async def test_a_stale_owner_whose_lease_still_looks_valid_writes_nothing(
    tmp_path: Path,
) -> None:
    """The recorder's lease check passes (the owner's clock says its lease is
    valid: it was paused right after the check, say), but another replica
    took the run over and fenced the trace: the append is refused, the run
    is marked lost, and the trace is unchanged."""
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
    taker_store.raise_fence(record, 2)  # the take-over, on another replica
    shard = owner_store.paths(record)[-1]
    before = shard.read_bytes()
    with pytest.raises(Fenced):
        await recorder.append(run, begin("t2"))  # type: ignore[arg-type]
    assert run.lost
    assert shard.read_bytes() == before
    # The taker's own records (its token) go in.
    taker = Run(
        record, dataclasses.replace(lease, token=2), run.log, AbortSignal(),
        ApprovalBroker(session_id),
    )  # fmt: skip
    taker_recorder = Recorder(DemoEngine(), taker_store, backend, HealthState())
    assert await taker_recorder.append(taker, begin("t3"))  # type: ignore[arg-type]
    assert [r.message.timestamp for r in read_jsonl(shard)] == ["t1", "t3"]


async def test_a_backend_that_lost_its_tokens_is_seeded_above_the_traces_fence(
    make_backend: Callable[..., Backend], tmp_path: Path
) -> None:
    """A session whose trace was fenced at token 5, indexed again by a backend
    that never saw it (a new Redis, or one that lost its data): its next run's
    token is above the fence, so its own trace does not refuse it."""
    data = tmp_path / "data"
    store = TraceStore(data)
    session_id = "session-2026-12-05-00-00-00-0000beef"
    record = SessionRecord(session_id, "t0", "t0", 0, (store.new_shard(session_id),))
    meta = p.session_meta(
        p.session_meta_payload(session_id, "omni-grpc", "demo", "unknown", "", "", "/w")
    )
    store.append(record, message_from_dict(meta), serialize_message(message_from_dict(meta)))
    store.raise_fence(record, 5)
    backend = make_backend()
    recorder = Recorder(DemoEngine(), TraceStore(data), backend, HealthState())
    await Recovery(backend, recorder, HealthState(), "replica").restore()
    lease = await backend.leases.acquire(session_id, "replica")
    assert lease is not None and lease.token > 5
    run = Run(
        record, lease, backend.logs.get(session_id), AbortSignal(), ApprovalBroker(session_id)
    )
    assert await recorder.append(run, begin("t1"))  # type: ignore[arg-type]
