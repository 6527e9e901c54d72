"""What an event costs Redis, in commands (#30 item 7).

Counted by a redis-server of the test's own (``INFO commandstats``, which
counts the commands a script runs too), so the counts are exact: nothing else
talks to it, and the batches are fixed (a burst is queued before the writer's
flusher first runs; a trickle awaits each event). Connection set-up and
redis-py's health-check pings are left out: they are no event's cost.

Before: a batch of n events cost 2n + 12 commands (an HINCRBY and an XADD per
event, the fence and the meta read field by field), so 14 per event when each
event is its own batch, and evicting an entry cost an XRANGE and an XDEL of
its own. Now: n + 7 (n + 9 when it evicts), so 8 for an event on its own.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis_server import RedisServer

from omni_grpc import protocol
from omni_grpc.convert import message_from_dict
from omni_grpc.runtime import bodies
from omni_grpc.runtime.backend import Backend
from omni_grpc.runtime.errors import Fenced
from omni_grpc.runtime.event_log import ReplayWindow
from omni_grpc.runtime.events import EventBody, utf16_length
from omni_grpc.runtime.health import RunFailure
from omni_grpc.runtime.redis import redis_backend
from omni_grpc.runtime.redis.event_log import encode_proto
from omni_grpc.runtime.redis.run_lease import Lease
from omni_grpc.vocabulary import AbortKind, SessionState

# Not an event's cost: a new connection's handshake, health checks, and the
# test's own reading of the counts.
_NOT_COUNTED = ("hello", "client", "select", "ping", "info", "config")
SESSION = "s-commands"


def delta(n: int) -> EventBody:
    return bodies.message_body(message_from_dict(protocol.partial_text("d", f"word {n} ")))


class Counter:
    def __init__(self, url: str) -> None:
        self.admin = aioredis.Redis.from_url(url)

    async def reset(self) -> None:
        await self.admin.config_resetstat()

    async def calls(self) -> dict[str, int]:
        stats = await self.admin.info("commandstats")
        out = {}
        for name, value in stats.items():
            command = name.removeprefix("cmdstat_")
            if command.split("|")[0] not in _NOT_COUNTED:
                out[command] = int(value["calls"])
        return out


@pytest.fixture
async def counter(redis: RedisServer) -> AsyncIterator[Counter]:
    counter = Counter(redis.url)
    yield counter
    await counter.admin.aclose()


async def open_run(redis: RedisServer, window: ReplayWindow | None = None) -> tuple[Backend, Lease]:
    backend = redis_backend(redis.url, window=window)
    lease = await backend.leases.acquire(SESSION, "replica-a")
    assert lease is not None
    # The script is loaded and the session's meta made: what follows is the
    # steady state of a run.
    await backend.logs.get(SESSION).publish(delta(0), fence=lease.token)
    return backend, lease


async def test_a_burst_costs_one_command_per_event_and_a_few_per_batch(
    redis: RedisServer, counter: Counter
) -> None:
    backend, lease = await open_run(redis)
    log = backend.logs.get(SESSION)
    try:
        n = 200
        await counter.reset()
        futures = [log.publish_nowait(delta(i), fence=lease.token) for i in range(1, n + 1)]
        events = [await f for f in futures]
        calls = await counter.calls()
    finally:
        await backend.aclose()
    assert [e.seq for e in events] == list(range(2, n + 2))
    assert calls.get("evalsha") == 1, calls  # the burst went in one batch
    assert calls.get("xadd") == n, calls
    # One XADD per event and at most eight more for the batch (before: 2n + 12 = 412).
    assert sum(calls.values()) <= n + 8, calls


async def test_an_event_on_its_own_costs_at_most_eight_commands(
    redis: RedisServer, counter: Counter
) -> None:
    backend, lease = await open_run(redis)
    log = backend.logs.get(SESSION)
    try:
        n = 20
        await counter.reset()
        for i in range(1, n + 1):
            await log.publish(delta(i), fence=lease.token)
        calls = await counter.calls()
    finally:
        await backend.aclose()
    assert calls.get("evalsha") == n, calls
    # Before: 14 per event (fence and run read apart, four HGETs, two HSETs).
    assert sum(calls.values()) <= 8 * n, calls


async def test_eviction_costs_no_command_per_evicted_event(
    redis: RedisServer, counter: Counter
) -> None:
    window = ReplayWindow(max_events=50)
    backend, lease = await open_run(redis, window)
    log = backend.logs.get(SESSION)
    try:
        n = 200
        await counter.reset()
        futures = [log.publish_nowait(delta(i), fence=lease.token) for i in range(1, n + 1)]
        for f in futures:
            await f
        calls = await counter.calls()
        kept = await log.window()
    finally:
        await backend.aclose()
    # A batch is at most a window (it never trims its own events): 4 batches.
    assert calls.get("evalsha") == 4, calls
    assert [e.seq for e in kept] == list(range(n + 2 - 50, n + 2))
    # Before: an XRANGE and an XDEL per evicted entry (754 commands here).
    assert sum(calls.values()) <= n + 4 * 10, calls


def stored_body(text: str, failure: RunFailure | None, kind: AbortKind | None) -> EventBody:
    if failure is not None:
        return bodies.task_state_body(SessionState.IDLE, failure=failure)
    msg = message_from_dict(protocol.partial_text("d", text))
    return bodies.message_body(msg, kind)


_texts = st.text(max_size=40)
_failures = st.none() | st.builds(RunFailure, st.sampled_from(["unavailable", "", "é"]), _texts)
_items = st.lists(
    st.tuples(_texts, _failures, st.none() | st.sampled_from(list(AbortKind))),
    min_size=1,
    max_size=12,
)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(batches=st.lists(_items, min_size=1, max_size=3))
async def test_the_packed_fields_come_back_as_written(
    redis: RedisServer, batches: list[list[tuple[str, RunFailure | None, AbortKind | None]]]
) -> None:
    # Every field the publish script unpacks (kind, size, failure code and
    # message, abort kind) and every payload, in bursts and alone.
    backend = redis_backend(redis.url, prefix=f"p{secrets.token_hex(4)}:")
    log = backend.logs.get(SESSION)
    written: list[EventBody] = []
    try:
        for batch in batches:
            items = [stored_body(*item) for item in batch]
            written += items
            futures = [log.publish_nowait(body) for body in items]
            for future in futures:
                await future
        kept = await log.window()
    finally:
        await backend.aclose()
    assert len(kept) == len(written)
    for event, body in zip(kept, written, strict=True):
        got = event.body
        assert got.data == body.data
        assert got.wire == encode_proto(body)
        assert got.size == utf16_length(body.data)
        assert got.is_message == body.is_message
        assert got.failure == (body.failure if body.failure and body.failure.code else None)
        assert got.abort_kind == (body.abort_kind or None)


async def test_a_stale_writer_is_refused_and_its_round_mate_is_not(
    redis: RedisServer, counter: Counter
) -> None:
    # Two sessions' batches sent in one round (the replica's shared pipeline):
    # each gets its own reply, the fenced one Fenced, the other its events.
    backend = redis_backend(redis.url)
    try:
        stale = await backend.leases.acquire("s-stale", "replica-a")
        live = await backend.leases.acquire("s-live", "replica-a")
        assert stale is not None and live is not None
        # Another replica took s-stale over: its fence moved on.
        await counter.admin.incr("omni:{s-stale}:fence")
        refused = backend.logs.get("s-stale").publish_nowait(delta(1), fence=stale.token)
        taken = backend.logs.get("s-live").publish_nowait(delta(1), fence=live.token)
        with pytest.raises(Fenced):
            await refused
        event = await taken
        assert event.seq == 1
        assert [e.seq for e in await backend.logs.get("s-stale").window()] == []
    finally:
        await backend.aclose()


async def test_a_redis_that_lost_its_scripts_takes_the_next_write(
    redis: RedisServer, counter: Counter
) -> None:
    backend, lease = await open_run(redis)
    log = backend.logs.get(SESSION)
    try:
        await counter.admin.script_flush()
        event = await log.publish(delta(1), fence=lease.token)
        assert event.seq == 2
        assert [e.seq for e in await log.window()] == [1, 2]
    finally:
        await backend.aclose()
