"""``Idempotency-Key`` on the task routes: a POST sent again starts nothing.

The stores (memory and Redis) keep one contract; real servers answer a
repeat of ``POST /api/sessions/{id}/tasks`` and of ``POST /v1/runs`` with the
first answer (the same 202 body; the same run's frames), marked
``Idempotent-Replayed: true``, and two replicas behind one Redis answer each
other's keys.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable

import httpx
import pytest
from conftest import ServeProcess
from redis_server import RedisServer
from waiting import wait_for

from omni_grpc.runtime.idempotency import Claimed, IdempotencyKeys, MemoryIdempotencyKeys
from omni_grpc.runtime.redis.connection import RedisConnection
from omni_grpc.runtime.redis.idempotency import RedisIdempotencyKeys

ServeFactory = Callable[..., ServeProcess]
WINDOW, PENDING = 30.0, 0.3


@pytest.fixture(params=["memory", "redis"])
async def keys(
    request: pytest.FixtureRequest, redis_server: RedisServer
) -> AsyncIterator[IdempotencyKeys]:
    if request.param == "memory":
        yield MemoryIdempotencyKeys(window=WINDOW, pending=PENDING)
        return
    conn = RedisConnection(redis_server.url, prefix=f"omni-test-{time.monotonic_ns()}:")
    yield RedisIdempotencyKeys(conn, window=WINDOW, pending=PENDING)
    await conn.aclose()


async def test_a_key_is_claimed_once_answered_and_then_repeated(keys: IdempotencyKeys) -> None:
    assert await keys.claim("k", "f1") is None
    # A repeat while the first is being answered sees the claim, with no answer.
    assert await keys.claim("k", "f1") == Claimed("f1", None)
    assert await keys.claim("k", "f2") == Claimed("f1", None)
    answer = b'{"sessionId":"s","queued":false,"odd":"?=|"}'
    await keys.remember("k", "f1", answer)
    assert await keys.claim("k", "f1") == Claimed("f1", answer)
    assert await keys.claim("k", "f2") == Claimed("f1", answer)
    # Another key is another request.
    assert await keys.claim("other", "f1") is None


async def test_a_forgotten_claim_frees_its_key(keys: IdempotencyKeys) -> None:
    assert await keys.claim("k", "f") is None
    await keys.forget("k")
    assert await keys.claim("k", "f") is None


async def test_a_claim_never_answered_lapses_and_an_answer_stays(keys: IdempotencyKeys) -> None:
    """A replica that died between its claim and its answer holds the key for
    ``PENDING`` seconds only; an answer is kept for the window."""
    assert await keys.claim("lapses", "f") is None
    claimed = time.monotonic()
    assert await keys.claim("stays", "f") is None
    await keys.remember("stays", "f", b"{}")
    deadline = claimed + 10
    while await keys.claim("lapses", "f") is not None:  # lapsed: claimed afresh
        assert time.monotonic() < deadline, "the unanswered claim did not lapse"
        await asyncio.sleep(0.02)  # polling the store's own clock
    assert time.monotonic() - claimed >= PENDING * 0.9  # Redis rounds to its ms clock
    assert await keys.claim("stays", "f") == Claimed("f", b"{}")


def test_the_memory_store_keeps_at_most_its_count() -> None:
    store = MemoryIdempotencyKeys(most=3)

    async def scenario() -> None:
        for key in "abcd":
            assert await store.claim(key, "f") is None
        assert await store.claim("a", "f") is None  # the oldest went first
        assert await store.claim("d", "f") == Claimed("f", None)

    asyncio.run(scenario())


# ---- real servers ------------------------------------------------------------------


def http(served: ServeProcess) -> httpx.Client:
    assert served.http_address is not None
    return httpx.Client(base_url=f"http://{served.http_address}", timeout=60)


def user_prompts(client: httpx.Client, session_id: str) -> list[str]:
    messages = client.get(f"/api/sessions/{session_id}/messages").json()["messages"]
    return [
        m["payload"]["text"]
        for m in messages
        if m["type"] == "model_msg"
        and m["payload"].get("role") == "user"
        and m["payload"].get("type") == "text"
    ]


def idle(client: httpx.Client, session_id: str) -> bool:
    return bool(client.get(f"/api/sessions/{session_id}").json()["session"]["status"] == "idle")


def test_a_task_post_sent_again_gets_the_first_answer_and_starts_nothing(
    serve_process: ServeFactory,
) -> None:
    with http(serve_process()) as client:
        session_id = client.post("/api/sessions", json={}).json()["session"]["sessionId"]
        path = f"/api/sessions/{session_id}/tasks"
        key = {"Idempotency-Key": "task-7f3a"}
        first = client.post(path, json={"prompt": "once"}, headers=key)
        assert first.status_code == 202 and "idempotent-replayed" not in first.headers
        # Sent again while the task runs, and after it ended: the same answer.
        again = client.post(path, json={"prompt": "once"}, headers=key)
        wait_for(lambda: idle(client, session_id), "the task did not end")
        later = client.post(path, json={"prompt": "once"}, headers=key)
        for repeat in (again, later):
            assert repeat.status_code == 202, repeat.text
            assert repeat.json() == first.json()
            assert repeat.headers["idempotent-replayed"] == "true"
        assert user_prompts(client, session_id) == ["once"]
        assert idle(client, session_id)

        # The same key with another request is refused; a bad key too.
        other = client.post(path, json={"prompt": "twice"}, headers=key)
        assert other.status_code == 422
        assert other.json()["error"]["code"] == "idempotency_key_reused"
        bad = client.post(path, json={"prompt": "x"}, headers={"Idempotency-Key": "x" * 256})
        assert bad.status_code == 400 and "Idempotency-Key" in bad.json()["error"]["message"]
        # A request that failed started nothing and keeps no answer: its retry runs.
        gone = client.post(
            "/api/sessions/session-2026-01-01-00-00-00-00000000/tasks",
            json={"prompt": "x"},
            headers={"Idempotency-Key": "fails"},
        )
        assert gone.status_code == 404
        assert user_prompts(client, session_id) == ["once"]


def frames(response: httpx.Response) -> list[str]:
    return [block for block in response.text.split("\n\n") if block.strip()]


def test_a_dialect_run_sent_again_gets_the_same_runs_frames(serve_process: ServeFactory) -> None:
    with http(serve_process()) as client:
        key = {"Idempotency-Key": "run-0001"}
        first = client.post("/v1/runs", json={"prompt": "only once"}, headers=key)
        assert first.status_code == 200
        session_id = first.headers["omni-session-id"]
        again = client.post("/v1/runs", json={"prompt": "only once"}, headers=key)
        assert again.status_code == 200 and again.headers["idempotent-replayed"] == "true"
        assert again.headers["omni-session-id"] == session_id
        # Frame for frame, ids included: the first run told again, from its start.
        assert frames(again) == frames(first)
        assert frames(first)[-1].startswith("event: done")
        assert user_prompts(client, session_id) == ["only once"]


def test_replicas_behind_one_redis_answer_each_others_keys(
    serve_process: ServeFactory, redis: RedisServer, tmp_path: pytest.TempPathFactory
) -> None:
    shared = ["--data-dir", str(tmp_path / "shared"), "--redis-url", redis.url]  # type: ignore[operator]
    one, other = serve_process(*shared), serve_process(*shared)
    key = {"Idempotency-Key": "across-replicas"}
    with http(one) as a, http(other) as b:
        first = a.post("/v1/runs", json={"prompt": "where?"}, headers=key)
        session_id = first.headers["omni-session-id"]
        again = b.post("/v1/runs", json={"prompt": "where?"}, headers=key)
        assert again.headers["idempotent-replayed"] == "true"
        assert frames(again) == frames(first)
        assert user_prompts(b, session_id) == ["where?"]
