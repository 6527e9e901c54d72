"""Sessions that end: DeleteSession, ``DELETE /api/sessions/{id}`` and
retention (``--session-ttl``), against real gRPC and HTTP servers on both
backends.

A deleted session leaves the index (so ``--max-sessions`` makes room again),
its buffers and pending approvals are freed, a running task is aborted first
and its stream ends with that abort, and an open Attach ends with NOT_FOUND
"was deleted". Its trace is kept under ``deleted/`` (never indexed again,
after a restart either) or removed with its workspace.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc
import httpx
import pytest

from omni_grpc.runtime.approvals import ApprovalMode
from omni_grpc.runtime.backend import Backend
from omni_grpc.runtime.limits import Limits
from omni_grpc.server import OmniServer, ServerConfig, build_server
from omni_grpc.trace import read_jsonl
from omni_grpc.transport.grpc import GrpcConfig
from omni_grpc.transport.sse.transport import SseConfig, SseTransport
from omni_grpc_proto.omni.v1 import agent_service_pb2 as pb
from omni_grpc_proto.omni.v1 import agent_service_pb2_grpc

ASK = pb.APPROVAL_MODE_ASK


@dataclass
class Served:
    server: OmniServer
    stub: agent_service_pb2_grpc.AgentServiceStub
    http: httpx.AsyncClient
    data: Path

    def traces(self, under: str = "traces") -> list[Path]:
        return sorted((self.data / under).rglob("*.jsonl"))


Start = Callable[..., AbstractAsyncContextManager[Served]]


@pytest.fixture
def served(tmp_path: Path, make_backend: Callable[..., Backend]) -> Start:
    @asynccontextmanager
    async def start(backend: Backend | None = None, **limits: object) -> AsyncIterator[Served]:
        data = tmp_path / "data"
        config = ServerConfig(
            data_dir=data,
            approval_mode=ApprovalMode.ALLOW_ALL,
            grpc=GrpcConfig(host="127.0.0.1", port=0),
            http=SseConfig(host="127.0.0.1", port=0),
            shutdown_grace=1.0,
            limits=Limits(**limits),  # type: ignore[arg-type]
        )
        server = build_server(config, backend=backend or make_backend())
        await server.start()
        [sse] = [t for t in server.transports if isinstance(t, SseTransport)]
        assert server.grpc is not None
        try:
            async with (
                grpc.aio.insecure_channel(server.grpc.address) as channel,
                httpx.AsyncClient(base_url=sse.url, timeout=30) as http,
            ):
                stub = agent_service_pb2_grpc.AgentServiceStub(channel)
                yield Served(server, stub, http, server.data_dir or data)
        finally:
            await server.stop()

    return start


async def finished_session(s: Served, prompt: str = "hi") -> str:
    responses = [r async for r in s.stub.Run(pb.RunRequest(prompt=prompt))]
    return responses[0].session_id


async def listed(s: Served) -> list[str]:
    return [i.session_id for i in (await s.stub.ListSessions(pb.ListSessionsRequest())).sessions]


async def test_a_deleted_session_is_gone_and_its_attach_ends_not_found(served: Start) -> None:
    async with served() as s:
        session_id = await finished_session(s)
        keep = await finished_session(s)
        [trace] = [t for t in s.traces() if t.name.startswith(session_id)]
        recorded = trace.read_bytes()
        attach = s.stub.Attach(pb.AttachRequest(session_id=session_id))
        first = await attach.read()  # subscribed: the unicast task_state
        assert first.event.task_state.state == pb.SESSION_STATE_IDLE

        done = await s.stub.DeleteSession(pb.DeleteSessionRequest(session_id=session_id))
        assert not done.was_running and not done.trace_deleted
        with pytest.raises(grpc.aio.AioRpcError) as ended:
            while await attach.read() is not grpc.aio.EOF:
                pass
        assert ended.value.code() == grpc.StatusCode.NOT_FOUND
        assert f"session {session_id!r} was deleted" in (ended.value.details() or "")

        assert await listed(s) == [keep]
        for call in (
            s.stub.DeleteSession(pb.DeleteSessionRequest(session_id=session_id)),
            s.stub.Attach(pb.AttachRequest(session_id=session_id)).read(),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as gone:
                await call
            assert gone.value.code() == grpc.StatusCode.NOT_FOUND
        # The trace is kept, byte for byte, where nothing indexes it.
        [kept] = [t for t in s.traces("deleted") if t.name.startswith(session_id)]
        assert kept.read_bytes() == recorded and not trace.exists()
        # What lies beside the shard (its history index) goes with it, so no
        # file of the session is left where the next server looks.
        assert (kept.parent / f"{kept.name}.index").is_file()
        assert list((s.data / "traces").rglob(f"{session_id}*")) == []
        assert not (s.data / "workspaces" / session_id).exists()
        assert (s.data / "deleted" / "workspaces" / session_id).is_dir()
    # Nor after a restart.
    async with served() as again:
        assert await listed(again) == [keep]


async def test_deleting_a_running_session_aborts_its_task_first(served: Start) -> None:
    async with served() as s:
        call = s.stub.Run(pb.RunRequest(prompt="hold on", approval_mode=ASK))
        seen = []
        async for response in call:
            seen.append(response)
            if response.event.WhichOneof("kind") == "approval_request":
                break
        session_id = seen[0].session_id
        done = await s.stub.DeleteSession(
            pb.DeleteSessionRequest(session_id=session_id, delete_trace=True)
        )
        assert done.was_running and done.trace_deleted
        rest = [r async for r in call]  # the Run stream ends with the abort, then idle
        messages = [r.message for r in rest if r.HasField("message")]
        assert messages[-1].abort.reason == "session deleted"
        assert rest[-1].event.task_state.state == pb.SESSION_STATE_IDLE
        assert await listed(s) == []
        # delete_trace: the trace, what lies beside it, and the workspace are gone.
        assert s.traces() == [] and s.traces("deleted") == []
        assert list((s.data / "traces").rglob(f"{session_id}*")) == []
        assert not (s.data / "workspaces" / session_id).exists()


async def test_http_delete_and_its_stream(served: Start) -> None:
    async with served() as s:
        sid = (await s.http.post("/api/sessions", json={})).json()["session"]["sessionId"]
        async with s.http.stream("GET", f"/api/sessions/{sid}/stream") as stream:
            assert stream.status_code == 200
            lines = stream.aiter_lines()
            while not (await anext(lines)).startswith("data:"):
                pass  # subscribed
            bad = await s.http.delete(f"/api/sessions/{sid}?deleteTrace=maybe")
            assert bad.status_code == 400 and "deleteTrace" in bad.text
            deleted = await s.http.delete(f"/api/sessions/{sid}")
            assert deleted.status_code == 204
            # The open stream ends; a reconnect is told the session is gone.
            async for _ in lines:
                pass
        assert (await s.http.get(f"/api/sessions/{sid}/stream")).status_code == 404
        assert (await s.http.delete(f"/api/sessions/{sid}")).status_code == 404
        assert (await s.http.get(f"/api/sessions/{sid}")).status_code == 404


async def test_max_sessions_is_no_longer_a_wall(served: Start) -> None:
    async with served(max_sessions=1) as s:
        first = await finished_session(s)
        with pytest.raises(grpc.aio.AioRpcError) as full:
            await finished_session(s)
        assert full.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "delete sessions" in (full.value.details() or "")
        await s.stub.DeleteSession(pb.DeleteSessionRequest(session_id=first))
        second = await finished_session(s)
        assert await listed(s) == [second]


async def test_idle_sessions_past_the_ttl_are_deleted(served: Start, backend_kind: str) -> None:
    async with served(session_ttl=0.5, delete_expired_traces=True) as s:
        watched = await finished_session(s)
        old = await finished_session(s)
        # A session with a stream open here is not idle: it stays.
        attach = s.stub.Attach(pb.AttachRequest(session_id=watched))
        await attach.read()

        async def expired() -> bool:
            return await listed(s) == [watched]

        await until_async(expired, "the idle session to expire")

        async def old_trace_gone() -> bool:
            return [t for t in s.traces() if t.name.startswith(old)] == []

        await until_async(old_trace_gone, "the expired trace to be removed")
        if backend_kind == "redis":
            backend = s.server.hub.backend
            assert await backend.logs.last_event_id(old) is None  # its stream key is gone
        attach.cancel()
        # Once nothing watches it, it expires too.
        # Gone from the index, then its files (the index goes first: a listed
        # session always has its trace).
        await until_async(lambda: _empty(s), "the watched session to expire")
        await until_async(lambda: _no_traces(s), "the expired trace to be removed")


async def _empty(s: Served) -> bool:
    return await listed(s) == []


async def _no_traces(s: Served) -> bool:
    return s.traces() == []


async def until_async(check: Callable[[], Awaitable[bool]], what: str) -> None:
    """``waiting.until`` for a condition that has to ask the server."""
    try:
        async with asyncio.timeout(30):
            while not await check():
                await asyncio.sleep(0.05)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None


async def test_a_kept_trace_still_reads_back(served: Start) -> None:
    async with served() as s:
        session_id = await finished_session(s, "keep me")
        history = [
            r.message async for r in s.stub.GetHistory(pb.GetHistoryRequest(session_id=session_id))
        ]
        await s.stub.DeleteSession(pb.DeleteSessionRequest(session_id=session_id))
        [kept] = s.traces("deleted")
        assert [r.message for r in read_jsonl(kept)] == history


async def test_a_delete_on_one_redis_replica_ends_streams_on_the_others(
    served: Start, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Two replicas on one Redis: an Attach open on B ends with NOT_FOUND
    "was deleted" when A deletes the session (it used to stay open, idle, for
    ever), and so does a reference SSE stream on B."""
    from redis_server import RedisServer

    from omni_grpc.runtime.redis import redis_backend

    redis: RedisServer = request.getfixturevalue("redis_server")
    prefix = f"cross-{tmp_path.name}:"

    def backend() -> Backend:
        return redis_backend(redis.url, prefix=prefix, owner_loss_timeout=1.0)

    async with served(backend()) as a, served(backend()) as b:
        session_id = await finished_session(a)
        attach = b.stub.Attach(pb.AttachRequest(session_id=session_id))
        first = await attach.read()  # subscribed on B
        assert first.event.task_state.state == pb.SESSION_STATE_IDLE
        async with b.http.stream("GET", f"/api/sessions/{session_id}/stream") as sse:
            assert sse.status_code == 200
            lines = sse.aiter_lines()
            while not (await anext(lines)).startswith("data:"):
                pass  # subscribed
            await a.stub.DeleteSession(pb.DeleteSessionRequest(session_id=session_id))
            with pytest.raises(grpc.aio.AioRpcError) as ended:
                async with asyncio.timeout(30):
                    while await attach.read() is not grpc.aio.EOF:
                        pass
            assert ended.value.code() == grpc.StatusCode.NOT_FOUND
            assert f"session {session_id!r} was deleted" in (ended.value.details() or "")
            async with asyncio.timeout(30):
                rest = [line async for line in lines]  # the SSE stream ends too
        assert not any(line.startswith("data:") and "task_state" not in line for line in rest)
