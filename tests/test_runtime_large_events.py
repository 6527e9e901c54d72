"""Messages of any size, on both backends: a reader that keeps up gets every
event whole, and memory stays bounded by the byte window.

A message may be larger than the whole window (the newest event is always
kept). The writer then waits until each reader that keeps up has been handed
the rest (back-pressure), so nothing a present reader has not seen is trimmed
from under it; one that stops reading is let go and told resync_required.
"""

from __future__ import annotations

import asyncio

import pytest
from conftest import MakeLog
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from omni_grpc.runtime import bodies
from omni_grpc.runtime.event_log import EventLog
from omni_grpc.runtime.events import EventBody, HubEvent
from omni_grpc.runtime.fanout import Fanout, Subscriber
from omni_grpc.runtime.memory_log import MemoryEventLog
from omni_grpc.runtime.redis import large_bodies
from omni_grpc.runtime.redis.event_log import RedisEventLog
from omni_grpc_proto.omni.v1 import agent_service_pb2

WINDOW = 2_000  # UTF-16 units
# On Redis, events over this many bytes of JSON are stored beside the stream
# in chunks of CHUNK bytes (large_bodies.py): lowered here to the scale of
# this window, so that every Redis case mixes both kinds of entry.
THRESHOLD, CHUNK = 700, 300


@pytest.fixture(autouse=True)
def bodies_beside_the_stream(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sizes of the bodies stored beside the stream (so a test can tell
    that its Redis case took that path)."""
    monkeypatch.setattr(large_bodies, "THRESHOLD", THRESHOLD)
    monkeypatch.setattr(large_bodies, "CHUNK", CHUNK)
    staged: list[int] = []
    stage = large_bodies.LargeBodies.stage

    async def counted(self: large_bodies.LargeBodies, data: bytes) -> bytes:
        staged.append(len(data))
        ref: bytes = await stage(self, data)
        return ref

    monkeypatch.setattr(large_bodies.LargeBodies, "stage", counted)
    return staged


async def assert_no_orphan_bodies(log: EventLog) -> None:
    """On Redis: the bodies hash holds exactly the chunks its entries name."""
    if not isinstance(log, RedisEventLog):
        return
    conn = log._conn  # the test reads Redis as it is
    named: set[bytes] = set()
    for _, fields in await conn.reads.xrange(log._events, "-", "+"):
        if b"x" in fields:
            nonce, count = fields[b"x"].rsplit(b":", 1)
            named |= {nonce + b"." + str(i).encode() for i in range(int(count))}
    held = set(await conn.reads.hkeys(log._bodies.key))
    assert held == named


KEEPS_UP = 10.0  # stall timeout: far longer than a reader that reads needs
RESYNC = b'{"type":"resync_required"}'
RESYNC_BODY = bodies.resync_required_body()


def sized(n: int, units: int) -> EventBody:
    """An event of exactly ``units`` UTF-16 units (at least the tag's)."""
    tag = f'"{n}:'
    text = tag + "x" * max(0, units - len(tag) - 1) + '"'
    event = agent_service_pb2.ServerEvent(
        unknown=agent_service_pb2.UnknownServerEvent(type="t", json=text)
    )
    return EventBody(None, event, text.encode())


class Bounds:
    """The largest backlog and buffer seen while writing."""

    def __init__(self) -> None:
        self.backlog = 0
        self.buffer = 0

    def sample(self, log: EventLog, subs: list[Subscriber]) -> None:
        self.backlog = max([self.backlog, *(s.backlog[1] for s in subs)])
        if isinstance(log, MemoryEventLog):
            self.buffer = max(self.buffer, log.buffer_stats()[1])


async def write(log: EventLog, items: list[EventBody], on_write: object = None) -> None:
    """A writer as the hub is one: queued, waiting only when the log says so."""
    last = None
    for item in items:
        last = log.publish_nowait(item)
        if callable(on_write):
            on_write()
        if log.congested:
            await last
    assert last is not None
    await last


async def read(sub: Subscriber, count: int, pace: int = 0) -> list[HubEvent]:
    """Reads ``count`` events, one per loop turn (slower than the writer);
    with ``pace``, a further ``pace`` turns per 500 units of each event, as a
    transport takes longer to send a larger one (so readers of the same
    message finish it at different times)."""
    out: list[HubEvent] = []
    while len(out) < count:
        event = await asyncio.wait_for(sub.next(), 30)
        assert event is not None
        out.append(event)
        for _ in range(1 + pace * event.body.size // 500):
            await asyncio.sleep(0)  # yielding the loop, not waiting on time
    return out


async def test_messages_larger_than_the_window_reach_a_lone_reader_whole(
    make_log: MakeLog, backend_kind: str, bodies_beside_the_stream: list[int]
) -> None:
    sizes = [100, 1_500, 1_900, 3 * WINDOW, 50, 2 * WINDOW, 1_999, 7 * WINDOW, 10]
    log = await make_log(max_bytes=WINDOW, stall_timeout=KEEPS_UP)
    sub = await log.subscribe()
    items = [sized(n, units) for n, units in enumerate(sizes)]
    reader = asyncio.create_task(read(sub, len(items)))  # type: ignore[arg-type]
    await write(log, items)
    got = await asyncio.wait_for(reader, 60)
    assert [e.data for e in got] == [i.data for i in items]
    assert all(e.buffered for e in got)
    assert sub.cutoffs == 0  # type: ignore[attr-defined]
    await assert_no_orphan_bodies(log)
    if backend_kind == "redis":  # both kinds of entry were written
        assert 0 < len(bodies_beside_the_stream) < len(items)


async def test_ten_readers_keep_up_with_messages_past_the_window(make_log: MakeLog) -> None:
    sizes = [1_000, 4 * WINDOW, 1_500, 1_500, 2 * WINDOW, 20] * 3
    log = await make_log(max_bytes=WINDOW, stall_timeout=KEEPS_UP)
    subs = [await log.subscribe() for _ in range(10)]
    items = [sized(n, units) for n, units in enumerate(sizes)]
    readers = [asyncio.create_task(read(s, len(items))) for s in subs]  # type: ignore[arg-type]
    await write(log, items)
    for sub, reader in zip(subs, readers, strict=True):
        got = await asyncio.wait_for(reader, 60)
        assert [e.data for e in got] == [i.data for i in items]
        assert sub.cutoffs == 0  # type: ignore[attr-defined]


async def test_ten_readers_at_different_paces_keep_up_with_messages_past_the_window(
    make_log: MakeLog,
) -> None:
    # Each reader takes longer over a large message than the one before: when
    # the reader the writer waits for has read down, the others may still hold
    # a whole window, and the writer must wait for them too.
    sizes = [1_000, 4 * WINDOW, 150, 150, 2 * WINDOW, 20, 3 * WINDOW, 1_900, 30] * 2
    log = await make_log(max_bytes=WINDOW, stall_timeout=KEEPS_UP)
    subs = [await log.subscribe() for _ in range(10)]
    items = [sized(n, units) for n, units in enumerate(sizes)]
    readers = [
        asyncio.create_task(read(s, len(items), pace))  # type: ignore[arg-type]
        for pace, s in enumerate(subs)
    ]
    await write(log, items)
    for sub, reader in zip(subs, readers, strict=True):
        got = await asyncio.wait_for(reader, 60)
        assert [e.data for e in got] == [i.data for i in items]
        assert sub.cutoffs == 0  # type: ignore[attr-defined]


async def test_the_writer_waits_for_every_reader_near_the_window_not_only_the_first() -> None:
    log = MemoryEventLog(RESYNC_BODY, max_bytes=WINDOW, stall_timeout=KEEPS_UP)
    ahead, behind = await log.subscribe(), await log.subscribe()
    first = await log.publish(sized(0, 100))
    assert await behind.next() == first  # ``ahead`` has more queued: the writer waits for it
    log.publish_nowait(sized(1, 3 * WINDOW))
    assert log.congested
    assert await ahead.next() == first
    assert (await ahead.next()) is not None  # ``ahead`` has read down; ``behind`` has not
    assert log.congested, "writing on now would push ``behind`` past the window"
    assert (await behind.next()) is not None
    assert not log.congested
    log.publish_nowait(sized(2, 10))
    for sub in (ahead, behind):
        event = await sub.next()
        assert event is not None and event.data == sized(2, 10).data
        assert sub.cutoffs == 0


async def test_small_events_after_a_message_past_the_window_cut_off_only_past_another_window() -> (
    None
):
    # Writers that do not wait (an approval's, the task state's) may add small
    # events behind a message larger than the window that a reader is still
    # taking: it has not fallen behind until they fill a window of their own.
    log = MemoryEventLog(RESYNC_BODY, max_bytes=WINDOW, stall_timeout=KEEPS_UP)
    sub = await log.subscribe()
    log.publish_nowait(sized(0, 5 * WINDOW))
    for n in range(1, 10):
        log.publish_nowait(sized(n, 200))
    assert sub.cutoffs == 0 and sub.backlog == (10, 5 * WINDOW + 9 * 200)
    log.publish_nowait(sized(10, 201))  # the small ones now pass the window
    assert sub.cutoffs == 1
    event = await sub.next()
    assert event is not None and event.data == RESYNC


async def test_a_reader_waiting_for_a_large_write_still_on_its_way_is_not_let_go() -> None:
    # On a shared backend a large write counts against every reader's share
    # while it is written and read back, which may take many stall budgets:
    # a reader with nothing queued meanwhile has not stopped reading.
    on_its_way = [(1, 3 * WINDOW)]
    fanout = Fanout(10_000, WINDOW, stall_timeout=0.01, in_flight=lambda: on_its_way[0])
    sub = fanout.add()
    sub.start([], 0, None)
    fired = asyncio.Event()
    stalled = fanout._stalled
    budgets = 0

    def counted() -> None:
        nonlocal budgets
        budgets += 1
        if budgets == 3:
            fired.set()
        stalled()

    fanout._stalled = counted  # type: ignore[method-assign]
    fanout.press()
    assert fanout.congested
    await asyncio.wait_for(fired.wait(), 30)
    assert not sub.lagging and fanout.pressed_by is sub
    # It arrives: a budget of its own to send it, and reading it lets the writer go.
    event = HubEvent(1, "e-1", sized(1, 3 * WINDOW), True)
    on_its_way[0] = (0, 0)
    assert fanout.deliver(event) == []
    assert not sub.lagging and fanout.congested
    assert await sub.next() is event
    assert not fanout.congested and sub.cutoffs == 0


async def test_a_reader_that_stops_gets_a_resync_while_the_other_gets_every_large_message(
    make_log: MakeLog,
) -> None:
    log = await make_log(max_bytes=WINDOW, stall_timeout=0.2)
    stuck = await log.subscribe()
    fast = await log.subscribe()
    items = [sized(n, units) for n, units in enumerate([1_500, 3 * WINDOW, 900] * 4)]
    reader = asyncio.create_task(read(fast, len(items)))  # type: ignore[arg-type]
    await write(log, items)
    got = await asyncio.wait_for(reader, 60)
    assert [e.data for e in got] == [i.data for i in items]
    # Let go after the stall timeout, then cut off: told, never a silent gap.
    assert stuck.cutoffs >= 1  # type: ignore[attr-defined]
    first = await asyncio.wait_for(stuck.next(), 5)
    assert first is not None and first.data == RESYNC


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    sizes=st.lists(st.integers(1, 3 * WINDOW), min_size=1, max_size=25),
    paces=st.lists(st.integers(0, 4), min_size=1, max_size=3),
)
async def test_any_size_sequence_reaches_readers_that_keep_up_within_the_byte_cap(
    make_log: MakeLog, sizes: list[int], paces: list[int]
) -> None:
    """One to three readers, each at its own pace."""
    log = await make_log(max_bytes=WINDOW, stall_timeout=KEEPS_UP)
    subs: list[Subscriber] = [await log.subscribe() for _ in paces]  # type: ignore[misc]
    items = [sized(n, units) for n, units in enumerate(sizes)]
    bounds = Bounds()
    tasks = [asyncio.create_task(read(s, len(items), p)) for s, p in zip(subs, paces, strict=True)]
    await write(log, items, lambda: bounds.sample(log, subs))
    for sub, task in zip(subs, tasks, strict=True):
        got = await asyncio.wait_for(task, 60)
        assert [e.data for e in got] == [i.data for i in items]
        assert sub.cutoffs == 0
    largest = max(i.size for i in items)
    # The buffer holds at most its cap, or the one event larger than it; a
    # reader's backlog at most a window plus the event that filled it (the
    # writer waits for it from then on).
    assert bounds.buffer <= max(WINDOW, largest)
    assert bounds.backlog <= WINDOW + largest
    await assert_no_orphan_bodies(log)
