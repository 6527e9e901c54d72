"""A session has one lifecycle (created, live, deleting, deleted), and a
delete is final (#43 item 1), with real ``serve`` processes on both backends.

The race: one client posts tasks to a session every 20 ms while another
deletes it. Whatever the interleaving, once ``DELETE`` has answered 204 the
session is gone for good: no later task is accepted, nothing of it is left
under ``traces/`` or ``workspaces/`` (a run accepted before the delete was
aborted by it and recorded where the delete put the trace), the kept copy
under ``deleted/`` opens with its ``session_meta``, it is not listed again,
also after a restart, and Redis holds no record of it (never a hash written
half, which a later request would fail on with a 500).
"""

from __future__ import annotations

import asyncio
import random
import signal
from collections.abc import Callable
from pathlib import Path

import grpc
import httpx
import orjson
import pytest
import redis.asyncio as aioredis
from a2a_support import http_url, start_server
from conftest import ServeProcess
from redis_server import RedisServer

from omni_grpc.runtime.backend import Backend
from omni_grpc.trace import read_jsonl
from omni_grpc.vocabulary import SessionLifecycle
from omni_grpc_proto.omni.v1 import agent_service_pb2 as pb
from omni_grpc_proto.omni.v1 import agent_service_pb2_grpc

ROUNDS = 15
WAIT = 60.0  # a safety net against hangs, never the thing a test checks


def stop(server: ServeProcess) -> None:
    """Stops the server the way an operator does (SIGTERM: a clean drain)."""
    server.process.send_signal(signal.SIGTERM)
    server.process.wait(WAIT)


async def race_once(http: httpx.AsyncClient, rng: random.Random, delete_trace: bool) -> str:
    """One round; returns the session id, deleted (204) by the end."""
    created = await http.post("/api/sessions", json={})
    assert created.status_code == 201, created.text
    sid: str = created.json()["session"]["sessionId"]
    accepted = asyncio.Event()
    deleted = asyncio.Event()
    answers: list[int] = []

    async def post_tasks() -> None:
        while True:
            after_delete = deleted.is_set()
            r = await http.post(f"/api/sessions/{sid}/tasks", json={"prompt": "hi"})
            answers.append(r.status_code)
            assert r.status_code in (202, 404, 409), r.text
            if after_delete:
                # Sent once the delete had answered: the session is gone.
                assert r.status_code == 404, answers
                return
            if r.status_code == 202:
                accepted.set()
            await asyncio.sleep(0.02)  # the client's pace, not a wait for a condition

    async def delete() -> None:
        await accepted.wait()
        await asyncio.sleep(rng.uniform(0, 0.06))  # somewhere in the stream of tasks
        query = "?deleteTrace=true" if delete_trace else ""
        r = await http.delete(f"/api/sessions/{sid}{query}")
        assert r.status_code == 204, r.text
        deleted.set()

    await asyncio.wait_for(asyncio.gather(post_tasks(), delete()), WAIT)
    assert (await http.get(f"/api/sessions/{sid}")).status_code == 404
    return sid


def files_of(data: Path, under: str, sid: str) -> list[Path]:
    return sorted((data / under).rglob(f"{sid}*"))


def check_gone(data: Path, sid: str, delete_trace: bool) -> None:
    assert files_of(data, "traces", sid) == []
    assert files_of(data, "workspaces", sid) == []
    kept = [p for p in files_of(data, "deleted/traces", sid) if p.suffix == ".jsonl"]
    if delete_trace:
        assert kept == [] and files_of(data, "deleted", sid) == []
        return
    # One shard, opening with the session's meta: a run the delete aborted
    # wrote there, never to a new shard of its own.
    assert len(kept) <= 1, kept
    for shard in kept:
        records = list(read_jsonl(shard))
        if records:
            assert records[0].message.WhichOneof("payload") == "session_meta"


async def listed(http: httpx.AsyncClient) -> set[str]:
    return {s["sessionId"] for s in (await http.get("/api/sessions")).json()["sessions"]}


@pytest.mark.parametrize("backend", ["memory", "redis"])
async def test_a_session_deleted_while_tasks_are_posted_stays_deleted(
    backend: str,
    serve_process: Callable[..., ServeProcess],
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    data = tmp_path / "data"
    args = ["--data-dir", str(data)]
    redis_url = None
    if backend == "redis":
        server_redis: RedisServer = request.getfixturevalue("redis")
        redis_url = server_redis.url
        args += ["--redis-url", redis_url]
    rng = random.Random(43)
    server = serve_process(*args)
    deleted: list[tuple[str, bool]] = []
    async with httpx.AsyncClient(base_url=f"http://{server.http_address}", timeout=WAIT) as http:
        kept = await http.post("/api/sessions", json={})
        keep = kept.json()["session"]["sessionId"]
        for i in range(ROUNDS):
            delete_trace = i % 3 == 2
            sid = await race_once(http, rng, delete_trace)
            check_gone(data, sid, delete_trace)
            deleted.append((sid, delete_trace))
        assert await listed(http) == {keep}
        # The server still takes tasks (no record left half-written to trip on).
        r = await http.post(f"/api/sessions/{keep}/tasks", json={"prompt": "still here"})
        assert r.status_code == 202, r.text
    stop(server)
    for sid, delete_trace in deleted:
        check_gone(data, sid, delete_trace)
    if redis_url is not None:
        admin = aioredis.Redis.from_url(redis_url)
        try:
            for sid, _ in deleted:
                assert await admin.exists(f"omni:session:{sid}") == 0, sid
            async for key in admin.scan_iter(match="omni:session:*"):
                assert await admin.hexists(key, "created_at"), key
        finally:
            await admin.aclose()
    again = serve_process(*args)
    async with httpx.AsyncClient(base_url=f"http://{again.http_address}", timeout=WAIT) as http:
        assert await listed(http) == {keep}
        for sid, _ in deleted:
            assert (await http.get(f"/api/sessions/{sid}")).status_code == 404


async def test_every_entry_point_refuses_a_run_once_a_delete_has_begun(
    tmp_path: Path, make_backend: Callable[..., Backend]
) -> None:
    """With the session deleting (the delete's first step taken, its abort
    and file moves not yet), no entry point starts a run on it: gRPC Run,
    the reference task route, the dialect, Connect and A2A are all refused as
    for an unknown session, and nothing is written to its trace."""
    server = await start_server(tmp_path / "data", backend=make_backend())
    try:
        sid = (await server.hub.create_session()).session_id
        [shard] = (tmp_path / "data" / "traces").rglob(f"{sid}_*.jsonl")
        index = server.hub.backend.index
        assert await index.advance(sid, SessionLifecycle.LIVE, SessionLifecycle.DELETING)
        assert server.grpc is not None
        async with grpc.aio.insecure_channel(server.grpc.address) as channel:
            stub = agent_service_pb2_grpc.AgentServiceStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                async for _ in stub.Run(pb.RunRequest(session_id=sid, prompt="hi")):
                    pass
            assert refused.value.code() == grpc.StatusCode.NOT_FOUND
        async with httpx.AsyncClient(base_url=http_url(server), timeout=WAIT) as http:
            task = await http.post(f"/api/sessions/{sid}/tasks", json={"prompt": "hi"})
            assert task.status_code == 404
            dialect = await http.post("/v1/runs", json={"prompt": "hi", "session_id": sid})
            assert dialect.status_code == 404
            body = orjson.dumps({"prompt": "hi", "sessionId": sid})
            connect = await http.post(
                "/omni.v1.AgentService/Run",
                content=len(body).to_bytes(5, "big") + body,
                headers={"content-type": "application/connect+json"},
            )
            assert b'"not_found"' in connect.content
            message = {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}],
                       "contextId": sid}  # fmt: skip
            request = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                       "params": {"message": message}}  # fmt: skip
            a2a = await http.post(
                "/a2a/jsonrpc",
                content=orjson.dumps(request),
                headers={"content-type": "application/json", "A2A-Version": "1.0"},
            )
            assert "contextId" in a2a.json()["error"]["message"]
        assert shard.read_bytes() == b""
        assert not await server.hub.backend.leases.running([sid])
    finally:
        await server.stop()
