"""The event log contract, on both backends (the in-process ring buffer and
Redis Streams), against the reference channel's recorded behaviour."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import MakeLog
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from omni_grpc.runtime.backend import Backend
from omni_grpc.runtime.event_log import EventLog, Subscription
from omni_grpc.runtime.events import EventBody, HubEvent, parse_event_id, utf16_length
from omni_grpc.runtime.memory_log import MemoryEventLog
from omni_grpc_proto.omni.v1 import agent_service_pb2

CONFORMANCE = Path(__file__).parent / "conformance"
RESYNC = EventBody(
    None,
    agent_service_pb2.ServerEvent(resync_required=agent_service_pb2.ResyncRequired()),
    b'{"type":"resync_required"}',
)


def body(text: str) -> EventBody:
    event = agent_service_pb2.ServerEvent(
        unknown=agent_service_pb2.UnknownServerEvent(type="t", json=text)
    )
    return EventBody(None, event, text.encode())


async def drain(sub: object, count: int) -> list[HubEvent]:
    out = []
    for _ in range(count):
        event = await asyncio.wait_for(sub.next(), 1)  # type: ignore[attr-defined]
        assert event is not None
        out.append(event)
    return out


async def epoch_of(log: EventLog) -> str:
    last = await log.last_event_id()
    assert last is not None
    return last.rsplit("-", 1)[0]


async def reference_channel(make_log: MakeLog) -> EventLog:
    """The channel state behind sse_replay_after_cases.json: ids 1-12 with the
    unicast ids 4, 8, 10 and 11 missing from the buffer."""
    log = await make_log(epoch="9f3c2a7e")
    for n in (1, 2, 3):
        await log.publish(body(f'"{n}"'))
    await log.subscribe(initial=[body('"ts4"')])
    for n in (5, 6, 7):
        await log.publish(body(f'"{n}"'))
    await log.subscribe(initial=[body('"ts8"')])
    await log.publish(body('"9"'))
    await log.subscribe("deadbeef-1", initial=[body('"ts11"')])  # takes 10 (resync) and 11
    await log.publish(body('"12"'))
    return log


async def test_replay_after_matches_the_reference_cases(make_log: MakeLog) -> None:
    cases = json.loads((CONFORMANCE / "sse_replay_after_cases.json").read_text())
    log = await reference_channel(make_log)
    assert await log.last_event_id() == cases.pop("lastEventId")
    for event_id, expected in cases.items():
        replay = await log.replay_after(event_id)
        assert (replay is not None) == expected["hit"], event_id
        assert [e.event_id for e in replay or []] == expected["ids"], event_id


async def test_reconnect_hit_replays_the_gap_then_initial_then_live(make_log: MakeLog) -> None:
    # sse_reconnect_hit.txt: Last-Event-ID 5 -> 6, 7 replayed, task_state id 8, live 9.
    log = await make_log(epoch="9f3c2a7e")
    for n in range(1, 4):
        await log.publish(body(f'"{n}"'))
    await log.subscribe(initial=[body('"ts"')])  # the fresh connect's unicast id 4
    for n in range(5, 8):
        await log.publish(body(f'"{n}"'))
    sub = await log.subscribe("9f3c2a7e-5", initial=[body('"ts"')])
    await log.publish(body('"9"'))
    events = await drain(sub, 4)
    assert [e.event_id for e in events] == [f"9f3c2a7e-{n}" for n in (6, 7, 8, 9)]
    assert [e.buffered for e in events] == [True, True, False, True]


async def test_reconnect_miss_sends_resync_first(make_log: MakeLog) -> None:
    # sse_reconnect_miss_resync.txt: a foreign epoch -> resync_required, task_state, live.
    log = await make_log(epoch="9f3c2a7e")
    for n in range(1, 10):
        await log.publish(body(f'"{n}"'))
    sub = await log.subscribe("deadbeef-3", initial=[body('"ts"')])
    await log.publish(body('"12"'))
    events = await drain(sub, 3)
    assert [e.event_id for e in events] == ["9f3c2a7e-10", "9f3c2a7e-11", "9f3c2a7e-12"]
    assert events[0].data == b'{"type":"resync_required"}'
    assert not events[0].buffered and not events[1].buffered


async def test_fresh_subscribe_replays_nothing(make_log: MakeLog) -> None:
    log = await make_log()
    await log.publish(body('"old"'))
    sub = await log.subscribe()
    await log.publish(body('"new"'))
    [event] = await drain(sub, 1)
    assert event.data == b'"new"'
    epoch = await epoch_of(log)
    assert parse_event_id(event.event_id) == (epoch, 2)
    assert len(epoch) == 8 and int(epoch, 16) >= 0


async def test_eviction_by_count_turns_old_ids_into_misses(make_log: MakeLog) -> None:
    log = await make_log(max_count=3)
    ids = [(await log.publish(body(f'"{n}"'))).event_id for n in range(6)]
    assert await log.replay_after(ids[1]) is None  # seq 2 was evicted (last evicted is 3)
    hit = await log.replay_after(ids[2])  # seq 3 == last evicted: still a hit
    assert hit is not None and [e.event_id for e in hit] == ids[3:]


async def test_eviction_by_size_counts_utf16_units(make_log: MakeLog) -> None:
    # "€" is 3 UTF-8 bytes but one UTF-16 unit; "😀" is 4 bytes and two units.
    assert utf16_length('"€"'.encode()) == 3
    assert utf16_length('"😀"'.encode()) == 4
    log = await make_log(max_bytes=10)
    first = await log.publish(body('"€€€"'))  # 5 units
    await log.publish(body('"€€€"'))  # 10 units in total: both fit
    epoch = await epoch_of(log)
    assert await log.replay_after(first.event_id) is not None
    assert len(await log.replay_after(f"{epoch}-0") or []) == 2
    await log.publish(body('"x"'))  # 13 units: the first is evicted
    assert await log.replay_after(f"{epoch}-0") is None
    assert [e.data for e in await log.window()] == ['"€€€"'.encode(), b'"x"']


async def test_a_slow_subscriber_is_cut_off_with_resync_and_keeps_going_live(
    make_log: MakeLog,
) -> None:
    log = await make_log(max_count=4)
    slow = await log.subscribe()
    fast = await log.subscribe()
    received: list[HubEvent] = []
    for n in range(10):
        await log.publish(body(f'"{n}"'))
        received.extend(await drain(fast, 1))
    # The fast reader saw everything, in order, and the publisher never waited.
    assert [e.data for e in received] == [f'"{n}"'.encode() for n in range(10)]
    # The slow one lost its backlog once it reached past the buffer.
    first = await drain(slow, 1)
    assert first[0].data == b'{"type":"resync_required"}'
    assert slow.cutoffs >= 1
    rest = []
    while slow.pending:
        rest.extend(await drain(slow, 1))
    # What it still holds is newer than the resync and still buffered.
    assert all(e.seq > first[0].seq for e in rest)
    assert slow.pending == 0


async def test_close_ends_subscriptions(make_log: MakeLog) -> None:
    log = await make_log()
    sub = await log.subscribe()
    waiter = asyncio.create_task(sub.next())
    await asyncio.sleep(0)
    await log.close()
    assert await asyncio.wait_for(waiter, 1) is None
    late = await log.subscribe()
    assert await late.next() is None


@pytest.mark.parametrize("bad", ["", "garbage", "abc-", "-", "x-1.5"])
def test_malformed_ids_do_not_parse(bad: str) -> None:
    assert parse_event_id(bad) is None


async def test_the_window_holds_exactly_its_cap_whatever_the_sizes(make_log: MakeLog) -> None:
    # A class of sizes, not one example: after every publish the window is the
    # longest suffix of what was published that fits both caps (the newest
    # event always kept).
    log = await make_log(max_count=7, max_bytes=40)
    published: list[bytes] = []
    for n in range(60):
        data = ('"' + "é" * ((n * 7) % 23) + '"').encode()
        published.append(data)
        await log.publish(body(data.decode()))
        expected: list[bytes] = []
        total = 0
        for item in reversed(published):
            size = utf16_length(item)
            if expected and (len(expected) + 1 > 7 or total + size > 40):
                break
            expected.insert(0, item)
            total += size
        assert [e.data for e in await log.window()] == expected, n


async def test_a_subscribe_racing_publishes_misses_and_repeats_nothing(make_log: MakeLog) -> None:
    # Subscribers join while a publisher runs: each sees strictly increasing
    # seqs, and every kept event after its first one.
    log = await make_log()
    first = await log.publish(body('"0"'))
    stop = asyncio.Event()

    async def publisher() -> None:
        n = 1
        while not stop.is_set():
            await log.publish(body(f'"{n}"'))
            n += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(publisher())
    subs = []
    for _ in range(5):
        subs.append(await log.subscribe(first.event_id, initial=[body('"init"')]))
        await asyncio.sleep(0)
    stop.set()
    await task
    final = await log.publish(body('"end"'))
    kept = {e.seq: e.data for e in await log.window()}
    for sub in subs:
        seen: list[HubEvent] = []
        while not seen or seen[-1].seq != final.seq:
            event = await asyncio.wait_for(sub.next(), 5)
            assert event is not None
            seen.append(event)
        seqs = [e.seq for e in seen]
        assert seqs == sorted(set(seqs))
        buffered = [e for e in seen if e.buffered]
        assert [e.seq for e in buffered] == [s for s in sorted(kept) if s > first.seq]
        assert all(kept[e.seq] == e.data for e in buffered)


# ---- back-pressure: a writer waits for the readers of its own process ----------


# A stall timeout no reader that keeps up comes near (it only ever waits if
# the back-pressure is broken, and then the test fails on its cut-off).
KEEPS_UP = 10.0


async def write_all(log: EventLog, count: int) -> list[HubEvent]:
    """A writer as the hub is one: it waits only when the log says so."""
    futures = []
    for n in range(count):
        futures.append(log.publish_nowait(body(f'"{n}"')))
        if log.congested:
            await futures[-1]
    return [await future for future in futures]


async def test_a_lone_reader_that_keeps_up_is_never_cut_off(make_log: MakeLog) -> None:
    # A run many times longer than the window, read by one reader that takes
    # one event per loop turn while the writer could write hundreds (on Redis
    # a whole batch per round trip).
    log = await make_log(max_count=20, stall_timeout=KEEPS_UP)
    sub = await log.subscribe()
    got: list[HubEvent] = []

    async def read(count: int) -> None:
        while len(got) < count:
            event = await sub.next()
            assert event is not None
            got.append(event)
            await asyncio.sleep(0)

    reader = asyncio.create_task(read(1000))
    await write_all(log, 1000)
    await asyncio.wait_for(reader, 60)
    assert [e.data for e in got] == [f'"{n}"'.encode() for n in range(1000)]
    assert sub.cutoffs == 0  # type: ignore[attr-defined]


async def test_a_lone_reader_keeps_up_with_a_byte_window_too(make_log: MakeLog) -> None:
    log = await make_log(max_bytes=2_000, stall_timeout=KEEPS_UP)
    sub = await log.subscribe()
    text = '"' + "x" * 98 + '"'  # 100 units: 20 fill the window

    async def read() -> list[HubEvent]:
        out = []
        while len(out) < 300:
            event = await sub.next()
            assert event is not None
            out.append(event)
            await asyncio.sleep(0)
        return out

    reader = asyncio.create_task(read())
    for _ in range(300):
        future = log.publish_nowait(body(text))
        if log.congested:
            await future
    got = await asyncio.wait_for(reader, 60)
    assert all(e.buffered and e.data == text.encode() for e in got)
    assert sub.cutoffs == 0  # type: ignore[attr-defined]


async def test_a_reader_that_stops_is_let_go_and_cut_off_while_others_keep_up(
    make_log: MakeLog,
) -> None:
    # Long enough for the reader that keeps up, whatever the machine's load:
    # the one that stopped holds the writer back once, for this long.
    log = await make_log(max_count=20, stall_timeout=2.0)
    stuck = await log.subscribe()
    fast = await log.subscribe()
    got: list[HubEvent] = []

    async def read() -> None:
        while len(got) < 300:
            event = await fast.next()
            assert event is not None
            got.append(event)
            await asyncio.sleep(0)

    reader = asyncio.create_task(read())
    await write_all(log, 300)
    await asyncio.wait_for(reader, 60)
    # The one that kept up got everything; the one that stopped held the
    # writer only until its stall timeout, then fell out of the window.
    assert [e.data for e in got] == [f'"{n}"'.encode() for n in range(300)]
    assert fast.cutoffs == 0 and stuck.cutoffs >= 1  # type: ignore[attr-defined]
    first = await stuck.next()
    assert first is not None and first.data == b'{"type":"resync_required"}'


async def test_a_closed_reader_releases_the_writer(make_log: MakeLog) -> None:
    log = await make_log(max_count=10)
    sub = await log.subscribe()
    futures = [log.publish_nowait(body(f'"{n}"')) for n in range(9)]
    held = log.publish_nowait(body('"9"'))
    assert log.congested and not held.done()
    sub.close()
    event = await asyncio.wait_for(held, 5)
    assert event.data == b'"9"' and not log.congested
    assert [(await f).data for f in futures] == [f'"{n}"'.encode() for n in range(9)]


# ---- contiguity: nothing after a gap is handed out silently ---------------------


def check_contiguous(delivered: list[HubEvent], kept: list[HubEvent]) -> None:
    """Each buffered event a reader was handed is the kept event right after the
    previous one it was handed, unless a resync_required came between them."""
    seqs = [e.seq for e in delivered]
    assert seqs == sorted(set(seqs)), "seqs must strictly increase"
    index = {e.seq: i for i, e in enumerate(kept)}
    last: int | None = None
    for event in delivered:
        if not event.buffered:
            if event.data == RESYNC.data:
                last = None  # history covers the gap; live goes on from here
            continue
        assert event.seq in index, f"seq {event.seq} was never published"
        assert event.data == kept[index[event.seq]].data
        if last is not None:
            assert index[event.seq] == last + 1, (
                f"{kept[last + 1].event_id} to {event.event_id} skipped with no resync"
            )
        last = index[event.seq]


async def read_until(sub: object, last_seq: int) -> list[HubEvent]:
    out: list[HubEvent] = []
    while not out or out[-1].seq < last_seq:
        event = await asyncio.wait_for(sub.next(), 5)  # type: ignore[attr-defined]
        assert event is not None
        out.append(event)
    return out


async def test_a_window_trimmed_past_a_reader_is_never_a_silent_gap(make_log: MakeLog) -> None:
    # Another replica writes a burst much larger than the window in one round
    # trip: the stream is trimmed before this replica's reader gets to it.
    log = await make_log(max_count=4)
    writer = await make_log(replica_of=log)
    sub = await log.subscribe()
    kept = [await writer.publish(body('"first"'))]
    got = await read_until(sub, kept[-1].seq)
    kept += await writer.publish_many([body(f'"{n}"') for n in range(50)])
    kept.append(await writer.publish(body('"last"')))
    got += await read_until(sub, kept[-1].seq)
    # It was told, and goes on live from the resync.
    assert any(e.data == RESYNC.data for e in got)
    kept.append(await writer.publish(body('"after"')))
    got += await read_until(sub, kept[-1].seq)
    check_contiguous(got, kept)
    assert got[-1].data == b'"after"'


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    steps=st.lists(
        st.tuples(st.sampled_from(["here", "there"]), st.integers(1, 12), st.integers(0, 12)),
        min_size=1,
        max_size=8,
    ),
    window=st.integers(2, 8),
)
async def test_every_reader_gets_every_event_or_a_resync(
    make_log: MakeLog, steps: list[tuple[str, int, int]], window: int
) -> None:
    # Bursts written here or on another replica, readers that read a few
    # events in between: whatever each reader is handed follows on, or says
    # resync_required first.
    log = await make_log(max_count=window)
    other = await make_log(replica_of=log)
    readers = [await log.subscribe(), await log.subscribe()]
    delivered: list[list[HubEvent]] = [[], []]
    kept: list[HubEvent] = []
    for where, burst, reads in steps:
        writer = log if where == "here" else other
        kept += await writer.publish_many([body(f'"{len(kept) + n}"') for n in range(burst)])
        for sub, out in zip(readers, delivered, strict=True):
            for _ in range(reads if sub is readers[0] else 1):
                if not sub.pending and out and out[-1].seq >= kept[-1].seq:  # type: ignore[attr-defined]
                    break
                event = await asyncio.wait_for(sub.next(), 5)
                assert event is not None
                out.append(event)
    for sub, out in zip(readers, delivered, strict=True):
        if not out or out[-1].seq < kept[-1].seq:
            out += await read_until(sub, kept[-1].seq)
        check_contiguous(out, kept)
        assert out[-1].seq >= kept[-1].seq  # the last event, or a resync after it


async def test_replayed_events_decode_to_what_was_published(make_log: MakeLog) -> None:
    from omni_grpc import protocol
    from omni_grpc.convert import message_from_dict
    from omni_grpc.runtime import bodies
    from omni_grpc.vocabulary import SessionState

    log = await make_log()
    call = message_from_dict(protocol.tool_call("list_workspace", '{"path":"é/😀"}', "call_1"))
    published = [
        bodies.message_body(message_from_dict(protocol.partial_text("delta", "héllo 😀"))),
        bodies.message_body(message_from_dict(protocol.assistant_text("1.0e5 \u2028 x" * 50))),
        bodies.message_body(call),
        bodies.approval_request_body(call),
        bodies.task_state_body(SessionState.IDLE),
    ]
    first = await log.publish(bodies.task_state_body(SessionState.RUNNING))
    for item in published:
        await log.publish(item)
    for replayed in (await log.replay_after(first.event_id), (await log.window())[1:]):
        assert replayed is not None
        assert [e.data for e in replayed] == [b.data for b in published]
        assert [e.message for e in replayed] == [b.message for b in published]
        assert [e.server_event for e in replayed] == [b.server_event for b in published]


async def test_the_memory_window_keeps_each_event_as_its_json_only() -> None:
    from omni_grpc import protocol
    from omni_grpc.convert import message_from_dict
    from omni_grpc.runtime import bodies

    log = MemoryEventLog(RESYNC)
    sub = await log.subscribe()
    msg = message_from_dict(protocol.partial_text("delta", "word"))
    live = await log.publish(bodies.message_body(msg))
    [delivered] = await drain(sub, 1)
    assert delivered.body.message is msg  # live readers get the decoded message
    [kept] = await log.window()
    assert kept.body.message is None and kept.body.server_event is None
    assert kept.body.encoded == "message"
    assert kept.message == msg and kept.event_id == live.event_id and kept.data == live.data


async def test_a_run_left_open_on_one_replica_is_closed_by_the_next_run_on_another(
    tmp_path: Path, make_backend: Callable[..., Backend], backend_kind: str
) -> None:
    """The mark that a trace holds a run open lives in the session's record,
    so the next run closes it whichever replica it lands on. Two hubs share
    one backend (on Redis, two connections under one prefix) and a data dir;
    A's disk refuses writes part-way through its run (``tests/
    test_cross_replica_unclosed.py`` does the same with real processes and a
    tmpfs that fills)."""
    import errno

    from omni_grpc import protocol
    from omni_grpc.convert import message_from_dict, message_to_dict
    from omni_grpc.engines.demo import DemoEngine
    from omni_grpc.runtime.bodies import is_task_end
    from omni_grpc.runtime.hub import Hub, RunRequest
    from omni_grpc.runtime.recovery import UNRECORDED_REASON
    from omni_grpc.trace import read_jsonl
    from omni_grpc.trace.records import TraceRecord
    from omni_grpc.trace.validate import validate_records

    shared = make_backend()
    # One process's memory backend is the whole shared state; a second
    # Redis backend of one test shares its key prefix.
    a = Hub(DemoEngine(), tmp_path, backend=shared, replica_id="a")
    b_backend = shared if backend_kind == "memory" else make_backend()
    b = Hub(DemoEngine(), tmp_path, backend=b_backend, replica_id="b")
    real_append = a.traces.append
    writes = 0

    def filling_append(*args: object, **kwargs: object) -> bool:
        nonlocal writes
        writes += 1
        if writes > 4:  # the meta, the input and a little of the answer fit
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_append(*args, **kwargs)  # type: ignore[arg-type]

    a.traces.append = filling_append  # type: ignore[method-assign]

    async def until_end(sub: Subscription) -> list[HubEvent]:
        out = []
        async for event in sub:
            out.append(event)
            if is_task_end(event):
                return out
        return out

    prompt = [message_from_dict(protocol.user_text("fill it"))]
    session_id, sub = await a.run(RunRequest(input=prompt))
    sent = [e.message for e in await until_end(sub) if e.message is not None]
    await a.wait_idle(session_id)
    a.traces.append = real_append  # type: ignore[method-assign]  # the disk has room again

    again = [message_from_dict(protocol.user_text("again"))]
    _, sub = await b.run(RunRequest(input=again, session_id=session_id))
    await until_end(sub)
    await b.wait_idle(session_id)

    [shard] = sorted((tmp_path / "traces").glob(f"*/{session_id}_*.jsonl"))
    records = [r.message for r in read_jsonl(shard)]
    payloads = [message_to_dict(m)["payload"] for m in records]
    # The close A's clients were sent (numbered in the log as the trace
    # numbers it) is recorded by B as sent (#41): the trace tells the
    # stream's story, and the repair finds nothing more to close.
    told = [message_to_dict(m)["payload"] for m in sent if m.WhichOneof("payload") == "abort"]
    assert len(told) == 1 and told[0]["reason"] != UNRECORDED_REASON  # type: ignore[index]
    closes = [i for i, p in enumerate(payloads) if p.get("type") == "abort"]  # type: ignore[union-attr]
    assert [payloads[i] for i in closes] == told
    inputs = [i for i, p in enumerate(payloads) if p.get("text") == "again"]  # type: ignore[union-attr]
    assert len(closes) == 1 and len(inputs) == 1 and closes[0] < inputs[0]
    trace = [TraceRecord(i + 1, m) for i, m in enumerate(records)]
    assert [i for i in validate_records(trace, trace=True) if i.severity == "error"] == []
    await a.shutdown()
    await b.shutdown()
