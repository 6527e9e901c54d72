"""A full or read-only data dir: runs end failed and say so, nothing unrecorded
is published, health reports it, and the next run works once storage returns.

The disk is a real tmpfs mounted for the test (tests/small_disk.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc
import httpx
import orjson
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from omni_grpc import protocol
from omni_grpc.client import AgentClient, AgentError
from omni_grpc.client.sse import read_dialect, read_reference
from omni_grpc.convert import message_from_dict, serialize_message
from omni_grpc.engines.demo import DemoEngine
from omni_grpc.runtime.hub import Hub, RunRequest
from omni_grpc.trace.resume import read_trace
from omni_grpc.trace.validate import TraceValidator
from omni_grpc.transport.sse.app import create_app
from omni_grpc.transport.sse.server import HttpServer
from omni_grpc_proto.omni.v1 import agent_service_pb2 as pb
from omni_grpc_proto.omni.v1 import agent_service_pb2_grpc, omni_pb2
from tests.conftest import ServerFactory
from tests.small_disk import SmallDisk


def _recordable(response: pb.RunResponse) -> bool:
    if not response.HasField("message"):
        return False
    arm = response.message.WhichOneof("payload") or ""
    return not arm.startswith("partial_") and not response.message.origin


def _trace_lines(data_dir: Path) -> list[bytes]:
    [shard] = (data_dir / "traces").glob("*/*.jsonl")
    return shard.read_bytes().splitlines()


def _errors(data_dir: Path) -> list[Any]:
    [shard] = (data_dir / "traces").glob("*/*.jsonl")
    records, skipped = read_trace(shard)
    assert skipped == []
    validator = TraceValidator(trace=True)
    issues = [i for n, m in enumerate(records, 1) for i in validator.check(n, m)]
    return [i for i in issues + validator.finish() if i.severity == "error"]


def _issues(data_dir: Path) -> list[str]:
    """Every issue the validator finds, warnings too ("request never ended")."""
    [shard] = (data_dir / "traces").glob("*/*.jsonl")
    records, skipped = read_trace(shard)
    assert skipped == []
    validator = TraceValidator(trace=True)
    issues = [i for n, m in enumerate(records, 1) for i in validator.check(n, m)]
    return [f"{i.severity}: {i.message}" for i in issues + validator.finish()]


def _health(channel: grpc.aio.Channel) -> Any:
    return health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""))


async def test_full_disk_fails_the_run_and_the_next_one_works(
    server_factory: ServerFactory, small_disk: SmallDisk
) -> None:
    data = small_disk.path / "data"
    # repeat: the final answer is longer than the slack in the trace's last page.
    server = await server_factory(data_dir=data, engine_options={"repeat": "60"})
    assert server.grpc is not None
    async with grpc.aio.insecure_channel(server.grpc.address) as channel:
        stub = agent_service_pb2_grpc.AgentServiceStub(channel)
        first = [r async for r in stub.Run(pb.RunRequest(prompt="one"))]
        session_id = first[0].session_id
        before = _trace_lines(data)

        small_disk.fill()
        received: list[pb.RunResponse] = []
        call = stub.Run(pb.RunRequest(prompt="two", session_id=session_id))
        with pytest.raises(grpc.aio.AioRpcError) as failed:
            async for response in call:
                received.append(response)
        assert failed.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "trace could not be written" in (failed.value.details() or "")
        assert "/" not in (failed.value.details() or ""), "no server path in the detail"
        # The stream itself says the run failed, before its task end: what was
        # open is closed failed, the request_end and the abort carry the reason.
        _check_failed_end([r.message for r in received if r.HasField("message")])
        assert received[-1].event.task_state.state == pb.SESSION_STATE_IDLE
        # What the client saw is in the trace up to where the disk refused it,
        # and nothing else is; the rest (the end) is owed to the trace.
        published = [serialize_message(r.message) for r in received if _recordable(r)]
        written = _trace_lines(data)[len(before) :]
        assert written == published[: len(written)] and len(written) < len(published)
        assert (await _health(channel)).status == health_pb2.HealthCheckResponse.NOT_SERVING

        # While the disk stays full, a run is refused before it starts.
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.Run(pb.RunRequest(prompt="three", session_id=session_id)).read()
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED

        small_disk.free()
        last = [r async for r in stub.Run(pb.RunRequest(prompt="four", session_id=session_id))]
        assert last[-1].event.task_state.state == pb.SESSION_STATE_IDLE
        assert (await _health(channel)).status == health_pb2.HealthCheckResponse.SERVING
        [info] = (await stub.ListSessions(pb.ListSessionsRequest())).sessions
        assert info.message_count == len(_trace_lines(data))
        # Once the disk took records again, the end the client saw was recorded
        # first, byte for byte: the trace tells the same story as the stream.
        lines = _trace_lines(data)
        assert lines[len(before) : len(before) + len(published)] == published
    assert _errors(data) == []


def _check_failed_end(messages: list[omni_pb2.OmniMessage]) -> None:
    """A run the trace storage stopped ends, in the stream, in the reference's
    words: every request closed (the last one ``failed``, with the reason),
    then ``abort`` with the reason."""
    assert messages[-1].WhichOneof("payload") == "abort", messages[-1]
    assert "the trace could not be written" in messages[-1].abort.reason
    begins = [m for m in messages if m.HasField("request_begin")]
    ends = [m.request_end for m in messages if m.HasField("request_end")]
    assert len(begins) == len(ends)
    if ends[-1].status != omni_pb2.STOP_REASON_COMPLETED:
        assert ends[-1].status == omni_pb2.STOP_REASON_FAILED
        assert ends[-1].error_message == messages[-1].abort.reason


async def test_the_reference_stream_says_the_run_failed(small_disk: SmallDisk) -> None:
    data = small_disk.path / "data"
    hub = Hub(DemoEngine(repeat=60), data)
    server = HttpServer(create_app(hub), port=0)
    await server.start()
    try:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
            created = await http.post("/api/sessions", json={})
            sid = created.json()["session"]["sessionId"]
            task = {"input": [{"type": "text", "text": "one"}]}
            await _task_on_stream(http, sid, task)
            small_disk.fill()
            items = await _task_on_stream(http, sid, task)
            _check_failed_end([i.message for i in items if i.message is not None])
            last = items[-1].server_event
            assert last is not None and last.task_state.state == pb.SESSION_STATE_IDLE
    finally:
        await hub.shutdown()
        await server.stop()


async def _task_on_stream(http: httpx.AsyncClient, sid: str, task: dict[str, Any]) -> list[Any]:
    """Starts a task and reads the session's reference stream to its end."""
    items: list[Any] = []
    stream = read_reference(http, f"/api/sessions/{sid}/stream", until_idle=True)
    first = await anext(stream)  # subscribed: the unicast task_state
    assert first.server_event is not None
    started = await http.post(f"/api/sessions/{sid}/tasks", json=task)
    assert started.status_code == 202, started.text
    async for item in stream:
        items.append(item)
    return items


async def test_read_only_data_dir_fails_the_run_unavailable(
    server_factory: ServerFactory, small_disk: SmallDisk
) -> None:
    data = small_disk.path / "data"
    server = await server_factory(data_dir=data)
    assert server.grpc is not None
    async with grpc.aio.insecure_channel(server.grpc.address) as channel:
        stub = agent_service_pb2_grpc.AgentServiceStub(channel)
        small_disk.remount("ro")
        with pytest.raises(grpc.aio.AioRpcError) as failed:
            async for _ in stub.Run(pb.RunRequest(prompt="one")):
                pass
        assert failed.value.code() == grpc.StatusCode.UNAVAILABLE
        assert (await _health(channel)).status == health_pb2.HealthCheckResponse.NOT_SERVING

        small_disk.remount("rw")
        responses = [r async for r in stub.Run(pb.RunRequest(prompt="two"))]
        assert responses[-1].event.task_state.state == pb.SESSION_STATE_IDLE
        assert (await _health(channel)).status == health_pb2.HealthCheckResponse.SERVING


async def test_dialect_run_on_a_full_disk_ends_failed_then_429(small_disk: SmallDisk) -> None:
    data = small_disk.path / "data"
    hub = Hub(DemoEngine(repeat=60), data)
    server = HttpServer(create_app(hub), port=0)
    await server.start()
    try:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
            items = [i async for i in read_dialect(http, "/v1/runs", {"prompt": "one"})]
            assert items[-1].data["status"] == "completed"
            small_disk.fill()
            items = [i async for i in read_dialect(http, "/v1/runs", {"prompt": "two"})]
            names = [i.event for i in items]
            assert names[-2:] == ["error", "done"], names
            assert items[-2].data["code"] == "resource_exhausted"
            assert items[-1].data["status"] == "failed"

            refused = await http.post("/v1/runs", json={"prompt": "three"})
            # RESOURCE_EXHAUSTED's status, as on Connect (#43 item 3).
            assert refused.status_code == 429
            assert refused.json()["error"]["code"] == "storage_unavailable"
            health = await http.get("/healthz")
            assert health.status_code == 503
            assert health.json()["status"] == "NOT_SERVING"
            assert "No space left on device" in health.json()["problems"]["storage"]

            small_disk.free()
            items = [i async for i in read_dialect(http, "/v1/runs", {"prompt": "four"})]
            assert items[-1].data["status"] == "completed"
            health = await http.get("/healthz")
            assert health.status_code == 200 and health.json() == {"status": "SERVING"}
    finally:
        await hub.shutdown()
        await server.stop()


async def test_a_crash_repair_the_disk_refused_is_made_before_the_next_run(
    small_disk: SmallDisk,
) -> None:
    data = small_disk.path / "data"
    shard = data / "traces" / "2026-01-01" / "s1_001.jsonl"
    shard.parent.mkdir(parents=True)
    meta = protocol.session_meta(
        protocol.session_meta_payload("s1", "p", "m", 1, "", "", "/w"),
        timestamp="2026-01-01T00:00:00.000Z",
    )
    records = [meta, protocol.user_text("q"), protocol.request_begin()]
    shard.write_bytes(
        b"".join(serialize_message(message_from_dict(r)) + b"\n" for r in records) + b'{"torn'
    )
    small_disk.remount("ro")
    hub = Hub(DemoEngine(), data)
    await hub.start()  # restores, but cannot write the repair
    small_disk.remount("rw")
    try:
        _, sub = await hub.run(
            RunRequest(input=[message_from_dict(protocol.user_text("again"))], session_id="s1")
        )
        sub.close()
        await hub.wait_idle("s1")
        assert _errors(data) == []
        assert (await hub.session_info("s1")).message_count == len(read_trace(shard)[0])
    finally:
        await hub.shutdown()


async def test_a_message_past_the_record_limit_stops_the_run_instead_of_vanishing(
    server_factory: ServerFactory, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    server = await server_factory(data_dir=data, engine_options={"repeat": "60"})
    assert server.grpc is not None
    # What GetHistory would skip (its reader's line limit, lowered to keep the test small).
    server.hub.max_record_bytes = 2000
    async with grpc.aio.insecure_channel(server.grpc.address) as channel:
        stub = agent_service_pb2_grpc.AgentServiceStub(channel)
        received: list[pb.RunResponse] = []
        with pytest.raises(grpc.aio.AioRpcError) as failed:
            async for response in stub.Run(pb.RunRequest(prompt="long")):
                received.append(response)
        assert failed.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "record limit" in (failed.value.details() or "")
        session_id = received[0].session_id
        history = [
            h.message async for h in stub.GetHistory(pb.GetHistoryRequest(session_id=session_id))
        ]
        published = [r.message for r in received if _recordable(r)]
        # Everything published is readable back, the session_meta first.
        assert [serialize_message(m) for m in history[1:]] == [
            serialize_message(m) for m in published
        ]
        assert (await _health(channel)).status == health_pb2.HealthCheckResponse.SERVING


async def test_the_python_client_stopping_at_the_task_end_gets_the_failure(
    server_factory: ServerFactory, small_disk: SmallDisk
) -> None:
    """The documented loop stops at ``is_task_end``; the status that says the
    run failed comes after that event, and must not be lost with it."""
    server = await server_factory(
        data_dir=small_disk.path / "data", engine_options={"repeat": "200"}
    )
    assert server.grpc is not None
    small_disk.leave(pages=2)
    seen: list[str] = []
    async with AgentClient(server.grpc.address) as agent:
        with pytest.raises(AgentError) as failed:
            async for event in agent.run("fill it"):
                seen.append(event.kind)
                if event.is_task_end:
                    break
    assert failed.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "trace could not be written" in failed.value.message
    assert "@task_state" in seen  # the run had started (running) before it failed


async def _run_through(transport: str, server: Any, session_id: str) -> None:
    """A run of the demo's long answer on ``session_id`` through
    ``transport``, read to its end whatever way it ends (the disk stops it)."""
    from a2a_support import http_url

    prompt = "fill it"
    if transport == "grpc":
        async with grpc.aio.insecure_channel(server.grpc.address) as channel:
            stub = agent_service_pb2_grpc.AgentServiceStub(channel)
            with pytest.raises(grpc.aio.AioRpcError):
                async for _ in stub.Run(pb.RunRequest(session_id=session_id, prompt=prompt)):
                    pass
        return
    async with httpx.AsyncClient(base_url=http_url(server), timeout=60) as http:
        if transport == "dialect":
            body = {"prompt": prompt, "session_id": session_id}
            items = [i async for i in read_dialect(http, "/v1/runs", body)]
            assert items[-1].data["status"] == "failed"
        elif transport == "connect":
            body = orjson.dumps({"prompt": prompt, "sessionId": session_id})
            answer = await http.post(
                "/omni.v1.AgentService/Run",
                content=len(body).to_bytes(5, "big") + body,
                headers={"content-type": "application/connect+json"},
            )
            assert answer.status_code == 200
            assert b'"error"' in answer.content  # the end of the stream says why
        else:
            message = {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": prompt}],
                       "contextId": session_id}  # fmt: skip
            request = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                       "params": {"message": message}}  # fmt: skip
            answer = await http.post(
                "/a2a/jsonrpc",
                content=orjson.dumps(request),
                headers={"content-type": "application/json", "A2A-Version": "1.0"},
            )
            assert answer.status_code == 200


@pytest.mark.parametrize("disk", ["full", "read-only"])
@pytest.mark.parametrize("transport", ["grpc", "dialect", "connect", "a2a"])
async def test_a_run_the_disk_stopped_ends_closed_in_its_trace_on_every_transport(
    small_disk: SmallDisk, transport: str, disk: str
) -> None:
    """A run stopped by a full or read-only disk, the disk writable again,
    then a clean stop: the trace is whole (its run closed, never ending in an
    open request), whichever transport started the run (#43 item 6)."""
    from a2a_support import start_server

    data = small_disk.path / "data"
    server = await start_server(data, engine_options={"repeat": "200"})
    try:
        session_id = (await server.hub.create_session()).session_id
        if disk == "full":
            small_disk.leave(pages=2)
        else:
            small_disk.remount("ro")
        await _run_through(transport, server, session_id)
        small_disk.free() if disk == "full" else small_disk.remount("rw")
    finally:
        await server.stop()
    assert _issues(data) == []
