"""One journal for trace and log (#41): a record number per recordable message.

The trace numbers its records (their ordinals, ``session_meta`` the 1st);
the log stores each message's number beside it and refuses one that does not
follow its last, on every backend (real redis-server for Redis), a batch
whole. After a fault what the log lacks is "the trace's records past the
log's last number" (``records_past``), whatever the records' bytes: records
recur byte for byte (#25), which a line-up by bytes got wrong. A log written
by 0.3 (no numbers) is still read, and takes a numbered record after it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
from collections.abc import Callable
from pathlib import Path
from tempfile import TemporaryDirectory

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from omni_grpc import protocol as p
from omni_grpc.convert import message_from_dict, serialize_message
from omni_grpc.engines.base import AbortSignal, JsonObject
from omni_grpc.engines.demo import DemoEngine
from omni_grpc.runtime import bodies
from omni_grpc.runtime.approvals import ApprovalBroker
from omni_grpc.runtime.backend import Backend
from omni_grpc.runtime.errors import RecordOutOfOrder
from omni_grpc.runtime.events import EventBody, HubEvent
from omni_grpc.runtime.health import HealthState
from omni_grpc.runtime.recorder import Recorder
from omni_grpc.runtime.recovery import Recovery, records_past
from omni_grpc.runtime.run import Run
from omni_grpc.runtime.session_index import SessionRecord
from omni_grpc.runtime.trace_store import ShardedTrace, TraceStore
from omni_grpc.trace import read_jsonl
from omni_grpc.trace.validate import validate_records
from omni_grpc.vocabulary import SessionState

STAMP = "2026-12-07T12:00:00.000Z"  # one millisecond for all: equal records are equal bytes
ALPHABET = [
    p.user_text("go", timestamp=STAMP),
    p.request_begin(timestamp=STAMP),
    p.assistant_text("a", timestamp=STAMP),
    p.request_end("completed", timestamp=STAMP),
]
RECORDS = [bodies.message_body(message_from_dict(item)) for item in ALPHABET]
META = bodies.message_body(
    message_from_dict(
        p.session_meta(
            p.session_meta_payload("session-x", "omni-grpc", "demo", "unknown", "", "", "/w"),
            timestamp=STAMP,
        )
    )
)
RUNNING = bodies.task_state_body(SessionState.RUNNING)


def numbered(index: int, number: int | None) -> EventBody:
    return dataclasses.replace(RECORDS[index % len(RECORDS)], record=number)


@pytest.mark.parametrize("backend_kind", ["memory", "redis"])
async def test_the_log_refuses_a_gap_and_a_repeat(make_backend: Callable[..., Backend]) -> None:
    log = make_backend().logs.get("session-journal-1")
    assert await log.last_record() is None
    await log.publish(RUNNING)  # not a record: no number, always taken
    await log.publish(numbered(0, 5))  # a log's first number is taken as it is
    await log.publish(numbered(1, 6))
    for wrong in (8, 6, 5):  # a gap, a repeat, one further back
        with pytest.raises(RecordOutOfOrder) as refused:
            await log.publish(numbered(2, wrong))
        assert (refused.value.number, refused.value.last) == (wrong, 6)
        # A failed write refuses the writer's later ones (a hole would go
        # unnoticed) until it is forgiven, as a run's close is.
        log.forgive(None)
    # A message without a number (a child session's, a partial) is taken anywhere.
    await log.publish(bodies.message_body(message_from_dict(p.assistant_text("~"))))
    await log.publish(numbered(2, 7))
    assert await log.last_record() == 7
    window = await log.window()
    assert [e.body.record for e in window] == [None, 5, 6, None, 7]
    # Nothing of a refused write was kept: ids follow on, data as published.
    assert [e.data for e in window if e.body.record] == [RECORDS[i].data for i in range(3)]


@pytest.mark.parametrize("backend_kind", ["memory", "redis"])
async def test_a_batch_with_one_number_out_of_order_is_refused_whole(
    make_backend: Callable[..., Backend],
) -> None:
    log = make_backend().logs.get("session-journal-2")
    await log.publish_many([numbered(0, 2), numbered(1, 3)])
    before = [e.event_id for e in await log.window()]
    with pytest.raises(RecordOutOfOrder):
        await log.publish_many([RUNNING, numbered(2, 4), numbered(3, 6), numbered(0, 7)])
    log.forgive(None)
    assert [e.event_id for e in await log.window()] == before
    assert await log.last_record() == 3
    events = await log.publish_many([RUNNING, numbered(2, 4), numbered(3, 5)])
    assert [e.body.record for e in events] == [None, 4, 5]
    assert await log.last_record() == 5


@pytest.mark.parametrize("backend_kind", ["memory", "redis"])
async def test_a_log_without_numbers_is_read_and_takes_a_numbered_record_after_it(
    make_backend: Callable[..., Backend],
) -> None:
    """What 0.3 wrote: messages without numbers (on Redis, entries without
    their ``r`` field and a meta without ``rec``, as a number 0 writes)."""
    log = make_backend().logs.get("session-journal-3")
    old = await log.publish_many([RUNNING, RECORDS[0], RECORDS[1]])
    assert await log.last_record() is None
    replayed = await log.replay_after(old[0].event_id)
    assert replayed is not None
    assert [(e.data, e.body.record) for e in replayed] == [(RECORDS[i].data, None) for i in (0, 1)]
    await log.publish(numbered(2, 4))
    assert await log.last_record() == 4
    with pytest.raises(RecordOutOfOrder):
        await log.publish(numbered(3, 4))
    assert [e.body.record for e in await log.window()] == [None, None, None, 4]


def _event(seq: int, body: EventBody) -> HubEvent:
    return HubEvent(seq, f"e-{seq}", body, True)


def _tail(trace: list[int], window: list[HubEvent], last: int | None, torn: bool) -> list[bytes]:
    with TemporaryDirectory() as tmp:
        first, second = Path(tmp) / "s_001.jsonl", Path(tmp) / "s_002.jsonl"
        lines = [META.data, *(RECORDS[i].data for i in trace)]
        half = len(lines) // 2  # two shards: numbers run on across them
        first.write_bytes(b"".join(line + b"\n" for line in lines[:half]))
        text = b"".join(line + b"\n" for line in lines[half:])
        if torn:  # a crash's half-written last line: never written whole, never numbered
            text += RECORDS[0].data[:9]
        second.write_bytes(text)
        return [serialize_message(m) for _, m in records_past([first, second], last, window)]


TRACES = st.lists(st.integers(0, len(RECORDS) - 1), max_size=24)


@settings(max_examples=300, deadline=None)
@given(trace=TRACES, data=st.data(), torn=st.booleans())
def test_what_the_log_lacks_is_the_trace_past_its_last_number(
    trace: list[int], data: st.DataObject, torn: bool
) -> None:
    """Over every prefix of a trace whose records recur byte for byte: the
    tail is exactly what the log has not got, nothing skipped, nothing twice."""
    logged = data.draw(st.integers(0, len(trace)), label="records the log got")
    expected = [RECORDS[i].data for i in trace[logged:]]
    if logged:
        # The log's window may have lost its start: the number still says it.
        start = data.draw(st.integers(0, logged - 1), label="first record kept")
        window = [
            _event(1 + k, numbered(trace[k], k + 2)) for k in range(start, logged)
        ]  # record k of the run is number k + 2 (session_meta is 1)
        assert _tail(trace, window, logged + 1, torn) == expected
    else:
        # A log that never got a record (its first run stopped before its
        # first publish) lacks all but session_meta.
        assert _tail(trace, [_event(1, RUNNING)], None, torn) == expected
        assert _tail(trace, [], None, torn) == expected


def test_a_log_written_by_0_3_gets_no_tail() -> None:
    """Its messages carry no number: where it stopped cannot be told without
    a byte search, which the journal no longer does; the close alone goes."""
    window = [_event(1, RUNNING), _event(2, RECORDS[0])]
    assert _tail([0, 1, 2], window, None, False) == []
    # One that lost its start cannot be told either.
    assert _tail([0, 1, 2], [_event(7, RUNNING)], None, False) == []


@pytest.mark.parametrize("backend_kind", ["memory", "redis"])
async def test_the_index_count_never_goes_down(make_backend: Callable[..., Backend]) -> None:
    """An owner paused past its lease that comes back writes its stale count
    after the replica that closed its run wrote the trace's: the next run
    numbers its records from the index's count, so the stale one must not
    land (the next run's numbers would repeat the log's)."""
    backend = make_backend()
    record = SessionRecord("session-journal-4", STAMP, STAMP, 0, ("traces/x_001.jsonl",))
    assert await backend.index.add(record)
    await backend.index.recorded(record.session_id, 12, "t-closer")
    await backend.index.recorded(record.session_id, 9, "t-paused-owner")
    got = await backend.index.get(record.session_id)
    assert got is not None and (got.message_count, got.updated_at) == (12, "t-closer")
    await backend.index.recorded(record.session_id, 13, "t-next")
    got = await backend.index.get(record.session_id)
    assert got is not None and got.message_count == 13


class _OwnerWritesAfterTheRead(TraceStore):
    """The closer's store: right after the closer reads the trace (and before
    its first append), the paused owner's late record lands."""

    def __init__(self, data: Path, late: Callable[[int], None]) -> None:
        super().__init__(data)
        self.late: Callable[[int], None] | None = late

    def view(self, record: SessionRecord) -> ShardedTrace:
        store = self

        class Racing(ShardedTrace):
            def messages(self) -> list[JsonObject]:
                out = super().messages()
                if store.late is not None:
                    late, store.late = store.late, None
                    late(len(out) + 1)
                return out

        return Racing(self.paths(record))


@pytest.mark.parametrize("backend_kind", ["redis"])
async def test_a_close_the_owner_s_late_record_overtook_is_made_again(
    make_backend: Callable[..., Backend], tmp_path: Path
) -> None:
    """The owner, paused past its lease, writes a record between the closer's
    read of the trace and its close's first append: that append's number is
    taken, so it is refused (no fence file), and the close is made again
    from the trace as it is then: the owner's record is published (past the
    log's last number) before the close, once; the trace validates."""
    backend = make_backend(owner_loss_timeout=0.5)
    data = tmp_path / "data"
    owner_store = TraceStore(data)
    session_id = "session-2026-12-07-12-00-00-0000c1a5"
    record = SessionRecord(session_id, STAMP, STAMP, 0, (owner_store.new_shard(session_id),))
    assert await backend.index.add(record)
    lease = await backend.leases.acquire(session_id, "owner")
    assert lease is not None
    event_log = backend.logs.get(session_id)
    owner = Run(
        record,
        dataclasses.replace(lease, valid_until=math.inf),  # valid by its own clock
        event_log,
        AbortSignal(),
        ApprovalBroker(session_id),
    )
    recorder = Recorder(DemoEngine(), owner_store, backend, HealthState())
    meta = META.decoded_message
    assert meta is not None and await recorder.append(owner, meta)
    await event_log.publish(RUNNING, fence=lease.token)
    for item in (p.user_text("go"), p.request_begin()):
        body = bodies.message_body(message_from_dict(item))
        assert await recorder.append(owner, message_from_dict(item), body.data)
        await event_log.publish(recorder.numbered(owner, body), fence=lease.token)
    late = message_from_dict(p.assistant_text("written late by the paused owner"))
    late_data = bodies.message_body(late).data

    def owner_comes_back(number: int) -> None:
        assert owner_store.append(record, late, late_data, number=number)

    while session_id not in await backend.leases.orphans():
        await asyncio.sleep(0.05)
    closer_store = _OwnerWritesAfterTheRead(data, owner_comes_back)
    closer = Recorder(DemoEngine(), closer_store, backend, HealthState())
    await Recovery(backend, closer, HealthState(), "closer").close_orphan(session_id)
    assert closer_store.late is None  # the owner's record did land mid-close

    [shard] = owner_store.paths(record)
    records = list(read_jsonl(shard))
    kinds = [r.message.WhichOneof("payload") for r in records]
    assert kinds.count("abort") == 1 and kinds[-1] == "abort"
    lines = [serialize_message(r.message) for r in records]
    assert lines.count(late_data) == 1 and lines.index(late_data) == 3  # after meta, input, begin
    assert [i for i in validate_records(records, trace=True) if i.severity == "error"] == []
    window = await event_log.window()
    logged = [e for e in window if e.body.record is not None]
    assert [e.data for e in logged] == [serialize_message(r.message) for r in records[1:]]
    assert [e.body.record for e in logged] == list(range(2, len(records) + 1))
