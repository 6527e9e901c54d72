"""A replica hands its own writes to its own subscribers as they are written,
not read back from Redis, and keeps the stream's order when another replica
writes the same session (#30 item 7), on a real redis-server."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from conftest import MakeLog

from omni_grpc.runtime.events import EventBody, HubEvent
from omni_grpc_proto.omni.v1 import agent_service_pb2

pytestmark = pytest.mark.parametrize("backend_kind", ["redis"])

# Only bounds a hang: every wait below is for a condition.
WAIT = 20.0


def body(text: str) -> EventBody:
    event = agent_service_pb2.ServerEvent(
        unknown=agent_service_pb2.UnknownServerEvent(type="t", json=text)
    )
    return EventBody(None, event, text.encode())


def hold_reader(log: Any, monkeypatch: pytest.MonkeyPatch) -> asyncio.Event:
    """Holds ``log``'s stream reader before it hands anything over, until the
    returned event is set."""
    gate = asyncio.Event()
    entries = log.entries

    async def held(items: list[Any]) -> None:
        await gate.wait()
        await entries(items)

    monkeypatch.setattr(log, "entries", held)
    return gate


async def next_event(sub: Any) -> HubEvent:
    event = await asyncio.wait_for(sub.next(), WAIT)
    assert event is not None
    return event  # type: ignore[no-any-return]


async def test_own_writes_go_out_at_once_and_another_replicas_keep_their_place(
    make_log: MakeLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    here = await make_log()
    there = await make_log(replica_of=here)
    sub = await here.subscribe()
    gate = hold_reader(here, monkeypatch)

    # This replica's write reaches its subscriber while the reader is held:
    # the very body written, not one decoded from the stream.
    first_body = body('"1"')
    first = await here.publish(first_body)
    got = await next_event(sub)
    assert got.body is first_body
    assert (got.event_id, got.prev) == (first.event_id, 0)

    # Another replica writes next; this replica's next write follows that
    # one in the stream, so it waits for the reader to bring the other's first.
    second = await there.publish(body('"2"'))
    third = await here.publish(body('"3"'))
    assert third.prev == second.seq
    assert sub.pending == 0  # type: ignore[attr-defined]

    gate.set()
    got_second, got_third = await next_event(sub), await next_event(sub)
    assert [got_second.event_id, got_third.event_id] == [second.event_id, third.event_id]
    assert (got_second.prev, got_third.prev) == (first.seq, second.seq)
    assert got_second.body.data == b'"2"'

    # Caught up: the next own write goes out at once again, and nothing the
    # reader read (this replica's own included) is handed out twice.
    fourth = await here.publish(body('"4"'))
    got_fourth = await next_event(sub)
    assert (got_fourth.event_id, got_fourth.prev) == (fourth.event_id, third.seq)
    await there.publish(body('"5"'))
    got_fifth = await next_event(sub)
    assert (got_fifth.body.data, got_fifth.prev) == (b'"5"', fourth.seq)
    assert sub.pending == 0  # type: ignore[attr-defined]


async def test_subscribers_joining_while_batches_are_in_flight_get_each_event_once(
    make_log: MakeLog,
) -> None:
    here = await make_log()
    there = await make_log(replica_of=here)
    start = await here.publish(body('"start"'))
    early = await here.subscribe()  # live before the burst
    total, chunk = 400, 50
    futures: list[asyncio.Future[HubEvent]] = []
    joined: list[tuple[Any, Any]] = []
    in_flight: list[int] = []
    # Subscribers join on both replicas while the writer's batches are queued,
    # on their way to Redis, or being handed out, each from the event before
    # the burst (replay, then live).
    for n in range(total):
        futures.append(here.publish_nowait(body(f'"{n}"')))
        if n % chunk == chunk // 2:
            log = here if len(joined) % 2 == 0 else there
            in_flight.append(sum(not f.done() for f in futures))
            joined.append((log, await log.subscribe(start.event_id)))
    written = [(await f).event_id for f in futures]

    for log, sub in [(here, early), *joined]:
        got: list[HubEvent] = []
        while len(got) < total:
            got.append(await next_event(sub))
        assert [e.event_id for e in got] == written, "replica here" if log is here else "there"
        assert [e.prev for e in got] == [start.seq, *(e.seq for e in got[:-1])]
        assert sub.pending == 0
    assert len(joined) == total // chunk and all(in_flight)
