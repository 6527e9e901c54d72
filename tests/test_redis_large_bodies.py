"""Large bodies on Redis are stored beside the stream in bounded chunks (#27).

A real redis-server (AOF, ``appendfsync always``) and two replicas' backends
on it. A body whose JSON is over ``large_bodies.THRESHOLD`` is written in
chunks of at most ``CHUNK`` bytes into ``{sid}:bodies``, the stream entry
only names it, and every reader (the writer's replica and another) gets it
whole, live and replayed. Its chunks go with the entry when the window
evicts it, a refused (fenced) write leaves none, the hash expires with the
stream once the run is over, and a reader that finds them gone is told to
resync, never handed a hole.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis_server import RedisServer

from omni_grpc import protocol
from omni_grpc.convert import message_from_dict
from omni_grpc.runtime import bodies
from omni_grpc.runtime.backend import Backend
from omni_grpc.runtime.errors import Fenced
from omni_grpc.runtime.event_log import ReplayWindow
from omni_grpc.runtime.events import EventBody, HubEvent
from omni_grpc.runtime.interface import Subscription
from omni_grpc.runtime.redis import redis_backend
from omni_grpc.runtime.redis.large_bodies import CHUNK, THRESHOLD

SESSION = "s-large"
EVENTS, BODIES = f"omni:{{{SESSION}}}:events", f"omni:{{{SESSION}}}:bodies"
WAIT = 60.0  # bounds a hang only


def text(n: int, size: int = 16) -> EventBody:
    """A message whose JSON is a little over ``size`` bytes, tagged ``n``."""
    tag = f"<{n}>"
    return bodies.message_body(
        message_from_dict(protocol.partial_text("d", tag + "y" * max(0, size - len(tag))))
    )


@pytest.fixture
async def admin(redis: RedisServer) -> AsyncIterator[Any]:
    # Typed Any: redis-py types replies as bytes | str (decode_responses).
    client = aioredis.Redis.from_url(redis.url)
    yield client
    await client.aclose()


@pytest.fixture
async def replicas(redis: RedisServer) -> AsyncIterator[tuple[Backend, Backend]]:
    a, b = redis_backend(redis.url), redis_backend(redis.url)
    yield a, b
    await a.aclose()
    await b.aclose()


async def read_until(sub: Subscription, seq: int) -> list[HubEvent]:
    out: list[HubEvent] = []
    while not out or out[-1].seq < seq:
        event = await asyncio.wait_for(sub.next(), WAIT)
        assert event is not None
        out.append(event)
    return out


async def test_a_large_body_is_written_in_bounded_chunks_and_read_whole_everywhere(
    replicas: tuple[Backend, Backend], admin: Any
) -> None:
    a, b = replicas
    lease = await a.leases.acquire(SESSION, "replica-a")
    assert lease is not None
    first = await a.logs.get(SESSION).publish(text(0), fence=lease.token)
    here = await a.logs.get(SESSION).subscribe(first.event_id)
    there = await b.logs.get(SESSION).subscribe(first.event_id)
    body = text(1, 3 * CHUNK + 12345)
    assert len(body.data) > THRESHOLD
    event = await a.logs.get(SESSION).publish(body, fence=lease.token)
    small = text(2)
    after = await a.logs.get(SESSION).publish(small, fence=lease.token)

    [(_, fields)] = await admin.xrange(EVENTS, f"{event.seq}-0", f"{event.seq}-0")
    assert b"x" in fields and b"d" not in fields and b"p" not in fields
    chunks = await admin.hgetall(BODIES)
    assert len(chunks) == 4 and all(len(c) <= CHUNK for c in chunks.values())
    nonce = fields[b"x"].rsplit(b":", 1)[0]
    assert b"".join(chunks[nonce + b"." + str(i).encode()] for i in range(4)) == body.data

    for sub in (here, there):
        got = await read_until(sub, after.seq)
        [large] = [e for e in got if e.seq == event.seq]
        assert large.data == body.data
        # A large body keeps its wire bytes, not its decoded message
        # (runtime/bodies.py): what it was published as is that.
        assert large.message == body.decoded_message
        assert large.wire == body.wire
        assert [e.seq for e in got] == [event.seq, after.seq]
    for backend in (a, b):
        replayed = await backend.logs.get(SESSION).replay_after(first.event_id)
        assert replayed is not None and [e.data for e in replayed] == [body.data, small.data]
        window = await backend.logs.get(SESSION).window()
        assert [e.data for e in window][-2:] == [body.data, small.data]


async def test_an_evicted_body_takes_its_chunks_with_it(redis: RedisServer, admin: Any) -> None:
    backend = redis_backend(redis.url, window=ReplayWindow(max_events=3))
    try:
        lease = await backend.leases.acquire(SESSION, "replica-a")
        assert lease is not None
        log = backend.logs.get(SESSION)
        for n in range(3):
            await log.publish(text(n, THRESHOLD + 10), fence=lease.token)
        assert await admin.hlen(BODIES) == 3 * 2  # two chunks each
        for n in range(3, 5):
            await log.publish(text(n), fence=lease.token)
        assert await admin.hlen(BODIES) == 2  # the one large body still in the window
        await log.publish(text(5), fence=lease.token)
        assert await admin.exists(BODIES) == 0
    finally:
        await backend.aclose()


async def test_a_fenced_write_leaves_no_chunk_and_a_run_over_lets_them_expire(
    replicas: tuple[Backend, Backend], admin: Any
) -> None:
    a, _ = replicas
    lease = await a.leases.acquire(SESSION, "replica-a")
    assert lease is not None
    log = a.logs.get(SESSION)
    await log.publish(text(0, THRESHOLD + 1), fence=lease.token)
    assert await admin.pttl(BODIES) == -1  # the run is open: it persists
    kept = await admin.hgetall(BODIES)
    # Another replica took the run over: the stale writer's large write is
    # refused, and what it staged for it is gone again.
    await admin.incr(f"omni:{{{SESSION}}}:fence")
    with pytest.raises(Fenced):
        await log.publish(text(1, 5 * CHUNK), fence=lease.token)
    assert await admin.hgetall(BODIES) == kept
    # The run ends (by its new holder): the hash now expires with the stream.
    token = int(await admin.get(f"omni:{{{SESSION}}}:fence"))
    await admin.set(f"omni:{{{SESSION}}}:run", token)
    log.forgive(lease.token)
    await log.publish(text(2), fence=token, end_run=True)
    ttl, stream_ttl = await admin.pttl(BODIES), await admin.pttl(EVENTS)
    assert 0 < ttl <= stream_ttl + 1000 and stream_ttl > 0


async def test_a_reader_whose_body_was_evicted_meanwhile_is_told_to_resync(
    replicas: tuple[Backend, Backend], admin: Any
) -> None:
    a, b = replicas
    lease = await a.leases.acquire(SESSION, "replica-a")
    assert lease is not None
    first = await a.logs.get(SESSION).publish(text(0), fence=lease.token)
    there = await b.logs.get(SESSION).subscribe(first.event_id)
    # Another replica's write evicts the entry between the reader's read of
    # the stream and its read of the chunks: here, the chunks vanish first.
    large = b.logs.get(SESSION)._bodies  # type: ignore[attr-defined]
    fetch = large.fetch

    async def evicted(ref: bytes) -> bytes | None:
        await admin.delete(BODIES)
        found: bytes | None = await fetch(ref)
        return found

    large.fetch = evicted
    event = await a.logs.get(SESSION).publish(text(1, THRESHOLD + 1), fence=lease.token)
    small = text(2)
    after = await a.logs.get(SESSION).publish(small, fence=lease.token)
    got = await read_until(there, after.seq)
    assert [e.data for e in got] == [bodies.resync_required_body().data, small.data]
    assert got[0].seq == event.seq  # it stands for the event it could not hand out
    # A late reader replayed over the same gap is told so too.
    late = await b.logs.get(SESSION).subscribe(first.event_id)
    resync = await asyncio.wait_for(late.next(), WAIT)
    assert resync is not None and resync.data == bodies.resync_required_body().data


async def test_deleting_the_session_deletes_its_bodies(
    replicas: tuple[Backend, Backend], admin: Any
) -> None:
    a, _ = replicas
    lease = await a.leases.acquire(SESSION, "replica-a")
    assert lease is not None
    await a.logs.get(SESSION).publish(text(0, 2 * CHUNK), fence=lease.token)
    assert await admin.exists(BODIES) == 1
    await a.logs.drop(SESSION)
    assert await admin.exists(BODIES) == 0
