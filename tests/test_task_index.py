"""The task index (``runtime/task_index.py``) on both backends, against a model.

Hypothesis makes sequences of puts (new runs and state changes, in a few
sessions, with timestamps that tie) and session removals; after them, every
page of every scope (all runs or one session's, any state or one, changed
after a time or not, every offset) must be what sorting the model's records
says: newest first, ties by name, the total counting every match. Redis is a
real redis-server, each example under a key prefix of its own; after every
session is removed, no key of that prefix is left.
"""

from __future__ import annotations

import asyncio
import secrets
from dataclasses import replace

import pytest
import redis.asyncio as aioredis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis_server import RedisServer

from omni_grpc.runtime.task_index import MemoryTaskIndex, TaskIndex, TaskRecord, instant

SESSIONS = ("s1", "s2", "s3")
STATES = ("TASK_STATE_WORKING", "TASK_STATE_COMPLETED", "TASK_STATE_CANCELED")


def stamp(second: int) -> str:
    return f"2026-12-07T03:{second // 60:02d}:{second % 60:02d}.250Z"


put = st.tuples(
    st.just("put"),
    st.sampled_from(SESSIONS),
    st.integers(1, 6),  # the run's first event seq: a few runs per session, put again
    st.sampled_from(STATES),
    st.integers(0, 20),  # few seconds: ties happen
    st.one_of(st.none(), st.text(min_size=1, max_size=8)),
)
remove = st.tuples(st.just("remove"), st.sampled_from(SESSIONS))
operations = st.lists(st.one_of(put, put, put, remove), max_size=40)


def record(
    session_id: str, seq: int, state: str, second: int, message_id: str | None
) -> TaskRecord:
    return TaskRecord(
        session_id=session_id,
        event_id=f"ep-{seq}",
        state=state,
        started_at=stamp(0),
        updated_at=stamp(second),
        last_event_id=f"ep-{seq + 10}",
        first_record=seq if seq % 2 else None,
        last_record=seq + 3 if seq % 2 else None,
        message_id=message_id,
        reason=None if state == STATES[0] else f"why {seq}",
    )


async def check(index: TaskIndex, ops: list[tuple[object, ...]]) -> None:
    model: dict[str, TaskRecord] = {}
    for op in ops:
        if op[0] == "put":
            _, sid, seq, state, second, message_id = op
            rec = record(str(sid), int(seq), str(state), int(second), message_id)  # type: ignore[arg-type, call-overload]
            await index.put(rec)
            model[rec.key] = rec
        else:
            await index.remove_session(str(op[1]))
            model = {k: r for k, r in model.items() if r.session_id != op[1]}
    for rec in model.values():
        assert await index.get(rec.session_id, rec.event_id) == rec
    assert await index.get("s1", "ep-99") is None
    for session_id in (None, *SESSIONS):
        for state in (None, *STATES):
            for after in (None, instant(stamp(5)), instant(stamp(5)) + 0.1):
                want = sorted(
                    (
                        r
                        for r in model.values()
                        if (session_id is None or r.session_id == session_id)
                        and (state is None or r.state == state)
                        and (after is None or instant(r.updated_at) > after)
                    ),
                    key=lambda r: (instant(r.updated_at), r.key),
                    reverse=True,
                )
                for limit in (1, 3, 50):
                    for offset in range(0, len(want) + 2, limit):
                        got, total = await index.page(
                            session_id=session_id,
                            state=state,
                            updated_after=after,
                            offset=offset,
                            limit=limit,
                        )
                        assert total == len(want)
                        assert got == want[offset : offset + limit]


HEALTH = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]


@settings(max_examples=60, deadline=None, suppress_health_check=HEALTH)
@given(ops=operations)
def test_memory_index_is_the_model(ops: list[tuple[object, ...]]) -> None:
    asyncio.run(check(MemoryTaskIndex(), ops))


@settings(max_examples=30, deadline=None, suppress_health_check=HEALTH)
@given(ops=operations)
def test_redis_index_is_the_model(redis_server: RedisServer, ops: list[tuple[object, ...]]) -> None:
    from omni_grpc.runtime.redis.connection import RedisConnection
    from omni_grpc.runtime.redis.task_index import RedisTaskIndex

    prefix = f"ti-{secrets.token_hex(6)}:"

    async def run() -> None:
        conn = RedisConnection(redis_server.url, prefix=prefix)
        try:
            await check(RedisTaskIndex(conn), ops)
            for session_id in SESSIONS:
                await RedisTaskIndex(conn).remove_session(session_id)
            raw = aioredis.from_url(redis_server.url)
            try:
                assert [k async for k in raw.scan_iter(match=f"{prefix}*")] == []
            finally:
                await raw.aclose()
        finally:
            await conn.aclose()

    asyncio.run(run())


@pytest.mark.parametrize("state", STATES)
async def test_a_state_change_moves_the_run_between_state_lists(state: str) -> None:
    index = MemoryTaskIndex()
    first = record("s1", 1, "TASK_STATE_WORKING", 1, "m1")
    await index.put(first)
    await index.put(replace(first, state=state, updated_at=stamp(9)))
    for other in STATES:
        got, total = await index.page(state=other)
        assert (total, [r.state for r in got]) == ((1, [state]) if other == state else (0, []))
