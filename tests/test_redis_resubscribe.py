"""Subscribers that come back together after Redis restarts get every event
(#25, soak G's one ``resync_required``), on a real redis-server.

A Redis restart ends every replica's stream reader, so each session's log is
no longer read anywhere; the clients come back with ``Last-Event-ID`` (an SSE
reader through nginx, an Attach that fails over) and the first subscribe on a
replica starts the reader after its own snapshot. When two subscribes of one
session on one replica are on their way at once and an event is written
between their snapshots, the one whose snapshot is older must still be handed
the events between the two: before the fix the reader started after the newer
snapshot, the older subscriber saw the next event not follow on from its own
(a gap no trimming made), and was cut off with a ``resync_required`` whose id
is a logged event's, as soak G's SSE reader was after an owner was killed
during a Redis restart (the closer wrote the run's close as the readers came
back).

The interleaving is forced (the older subscribe is held between its snapshot
and the rest), with the writer on the other replica (the reader brings its
events) or on this one (its own events go out from the write path).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from redis_server import RedisServer

from omni_grpc.runtime import bodies
from omni_grpc.runtime.errors import BackendUnavailable
from omni_grpc.runtime.event_log import ReplayWindow
from omni_grpc.runtime.events import EventBody, HubEvent
from omni_grpc.runtime.redis.connection import RedisConnection
from omni_grpc.runtime.redis.event_log import RedisEventLog
from omni_grpc_proto.omni.v1 import agent_service_pb2

# Only bounds a hang: every wait below is for a condition.
WAIT = 60.0


def body(text: str) -> EventBody:
    event = agent_service_pb2.ServerEvent(
        unknown=agent_service_pb2.UnknownServerEvent(type="t", json=text)
    )
    return EventBody(None, event, text.encode())


@pytest.fixture
async def replicas(redis: RedisServer) -> AsyncIterator[tuple[RedisEventLog, RedisEventLog]]:
    """One session's log as two replicas see it, each on its own connection."""
    conns = [RedisConnection(redis.url, prefix="resub:") for _ in range(2)]
    logs = [RedisEventLog(c, "s1", ReplayWindow(), idle_ttl=600) for c in conns]
    yield logs[0], logs[1]
    for log in logs:
        await log.close()
    for conn in conns:
        await conn.aclose()


async def publish(log: RedisEventLog, text: str) -> HubEvent:
    """A write once Redis serves again: a connection the restart broke fails
    the first command sent on it, and a writer tries again."""
    async with asyncio.timeout(WAIT):
        while True:
            try:
                return await log.publish(body(text))
            except BackendUnavailable:
                await asyncio.sleep(0.05)


async def until(events: list[HubEvent], sub: Any, event_id: str) -> None:
    async with asyncio.timeout(WAIT):
        while not any(e.event_id == event_id for e in events):
            event = await sub.next()
            assert event is not None, "the subscription ended"
            events.append(event)


@pytest.mark.parametrize("writer", ["other replica", "this replica"])
async def test_subscribers_back_after_a_restart_get_every_event(
    redis: RedisServer,
    replicas: tuple[RedisEventLog, RedisEventLog],
    monkeypatch: pytest.MonkeyPatch,
    writer: str,
) -> None:
    here, there = replicas
    source = there if writer == "other replica" else here
    first = await publish(there, '"1"')
    before = await here.subscribe(first.event_id)
    assert here.reading

    # Redis restarts (SIGKILL, then the same AOF): the reader here loses the
    # stream, and its subscriber is told.
    redis.kill()
    with pytest.raises(BackendUnavailable):
        async with asyncio.timeout(WAIT):
            while await before.next() is not None:
                pass
    assert not here.reading
    redis.start()

    # Two clients come back to this replica from the same Last-Event-ID; the
    # first's snapshot is taken, then held before it goes on.
    snapshot = here._snapshot
    taken, go_on = asyncio.Event(), asyncio.Event()
    calls = [0]

    async def held(*args: Any) -> Any:
        calls[0] += 1
        result = await snapshot(*args)
        if calls[0] == 1:
            taken.set()
            await go_on.wait()
        return result

    monkeypatch.setattr(here, "_snapshot", held)
    older_task = asyncio.create_task(here.subscribe(first.event_id))
    await asyncio.wait_for(taken.wait(), WAIT)
    # Written between the two snapshots (the closer's close, in the soak).
    second = await publish(source, '"2"')
    # The newer subscribe is done first: it starts this replica's reader.
    newer = await asyncio.wait_for(here.subscribe(first.event_id), WAIT)
    assert here.reading
    go_on.set()
    older = await asyncio.wait_for(older_task, WAIT)
    third = await publish(source, '"3"')

    logged = {e.event_id: e.body.data for e in await there.window()}
    assert list(logged) == [first.event_id, second.event_id, third.event_id]
    for name, sub in (("older", older), ("newer", newer)):
        got: list[HubEvent] = []
        await until(got, sub, third.event_id)
        assert not [e for e in got if bodies.is_resync(e)], f"{name}: resync_required"
        # Every event it got whose id names a logged event is that event.
        assert [e.body.data for e in got if e.event_id in logged] == [
            logged[e.event_id] for e in got if e.event_id in logged
        ], name
        assert [e.event_id for e in got] == [second.event_id, third.event_id], name
        assert sub.pending == 0  # type: ignore[attr-defined]


async def test_a_subscriber_whose_events_were_trimmed_meanwhile_is_told_to_resync(
    redis: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What another subscribe's reader started after was trimmed before this
    subscribe read it: it is told ``resync_required``, never handed the
    events after the trimmed ones as if they followed on."""
    conns = [RedisConnection(redis.url, prefix="trim:") for _ in range(2)]
    here, there = (RedisEventLog(c, "s1", ReplayWindow(2), idle_ttl=600) for c in conns)
    try:
        first = await publish(there, '"1"')
        snapshot = here._snapshot
        taken, go_on = asyncio.Event(), asyncio.Event()
        calls = [0]

        async def held(*args: Any) -> Any:
            calls[0] += 1
            result = await snapshot(*args)
            if calls[0] == 1:
                taken.set()
                await go_on.wait()
            return result

        monkeypatch.setattr(here, "_snapshot", held)
        older_task = asyncio.create_task(here.subscribe(first.event_id))
        await asyncio.wait_for(taken.wait(), WAIT)
        written = [await publish(there, f'"{n}"') for n in range(2, 5)]  # 1 and 2 trimmed
        newer = await asyncio.wait_for(here.subscribe(written[-1].event_id), WAIT)
        go_on.set()
        older = await asyncio.wait_for(older_task, WAIT)
        fifth = await publish(there, '"5"')

        got: list[HubEvent] = []
        await until(got, older, fifth.event_id)
        assert [bodies.is_resync(e) for e in got] == [True, False]
        assert got[1].event_id == fifth.event_id
        assert got[0].seq < fifth.seq
        got = []
        await until(got, newer, fifth.event_id)
        assert [e.event_id for e in got] == [fifth.event_id]
    finally:
        for log in (here, there):
            await log.close()
        for conn in conns:
            await conn.aclose()
