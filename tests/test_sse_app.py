"""The SSE app over a real hub, served by uvicorn on loopback, driven over HTTP."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from waiting import until

from omni_grpc.client.sse import DialectEvent, StreamItem, read_dialect, read_reference
from omni_grpc.engines.demo import DemoEngine
from omni_grpc.runtime import bodies
from omni_grpc.runtime.hub import Hub
from omni_grpc.runtime.memory_log import MemoryEventLog
from omni_grpc.transport.sse.app import create_app
from omni_grpc.transport.sse.server import HttpServer
from omni_grpc.vocabulary import DialectEventName

CONFORMANCE = Path(__file__).parent / "conformance"


@dataclass
class Served:
    hub: Hub
    url: str
    http: httpx.AsyncClient
    logs: list[MemoryEventLog] = field(default_factory=list)


@asynccontextmanager
async def served(
    tmp_path: Path, *, pacing: float = 0.0, **app_options: Any
) -> AsyncIterator[Served]:
    logs: list[MemoryEventLog] = []

    def log_factory(_sid: str) -> MemoryEventLog:
        logs.append(MemoryEventLog(bodies.resync_required_body()))
        return logs[-1]

    hub = Hub(DemoEngine(pacing=pacing), tmp_path / "data", log_factory=log_factory)
    server = HttpServer(create_app(hub, **app_options), port=0)
    await server.start()
    try:
        async with httpx.AsyncClient(base_url=server.url, timeout=10) as http:
            yield Served(hub, server.url, http, logs)
    finally:
        await hub.shutdown()
        await server.stop()


async def new_session(s: Served, **headers: str) -> str:
    r = await s.http.post("/api/sessions", json={}, headers=headers)
    assert r.status_code == 201, r.text
    sid: str = r.json()["session"]["sessionId"]
    return sid


async def collect_task(s: Served, sid: str, body: dict[str, Any]) -> list[StreamItem]:
    """Watches the stream, starts a task once connected, and returns the task's events."""
    items: list[StreamItem] = []
    connected = asyncio.Event()

    async def watch() -> None:
        async for item in read_reference(s.http, f"/api/sessions/{sid}/stream", until_idle=True):
            items.append(item)
            connected.set()

    watcher = asyncio.create_task(watch())
    await asyncio.wait_for(connected.wait(), 5)
    r = await s.http.post(f"/api/sessions/{sid}/tasks", json=body)
    assert r.status_code == 202, r.text
    await asyncio.wait_for(watcher, 10)
    return items


def frames_of(raw: bytes) -> list[dict[str, str]]:
    """Splits raw SSE bytes into frames of their fields (comments dropped)."""
    frames = []
    for block in raw.split(b"\n\n"):
        fields = {}
        for line in block.decode().split("\n"):
            if line and not line.startswith(":"):
                name, _, value = line.partition(": ")
                fields[name] = value
        if fields:
            frames.append(fields)
    return frames


async def read_raw(http: httpx.AsyncClient, url: str, n: int, **headers: str) -> bytes:
    raw = b""
    async with http.stream("GET", url, headers=headers) as r:
        assert r.status_code == 200
        async for chunk in r.aiter_bytes():
            raw += chunk
            if raw.count(b"\n\n") >= n:
                return raw
    raise AssertionError(f"stream ended after {raw!r}")


async def test_a_task_streams_in_reference_order_and_matches_history(tmp_path: Path) -> None:
    async with served(tmp_path) as s:
        sid = await new_session(s)
        items = await collect_task(s, sid, {"input": [{"type": "text", "text": "hello"}]})
        kinds = [i.server_event_kind or i.message.WhichOneof("payload") for i in items]  # type: ignore[union-attr]
        # Connect: the unicast task_state; then the input, running, the engine, idle.
        assert kinds[:3] == ["task_state", "text", "task_state"]
        assert items[0].data == '{"type":"task_state","state":"idle","queued":0}'
        assert json.loads(items[1].data)["payload"]["text"] == "hello"
        assert items[2].data == '{"type":"task_state","state":"running","queued":0}'
        assert kinds[-1] == "task_state" and json.loads(items[-1].data)["state"] == "idle"
        assert "partial_text" in kinds and "tool_call_output" in kinds
        # ids are the hub's: one epoch, strictly increasing seqs.
        epochs = {i.event_id.rsplit("-", 1)[0] for i in items}
        seqs = [int(i.event_id.rsplit("-", 1)[1]) for i in items]
        assert len(epochs) == 1 and seqs == sorted(seqs) and len(set(seqs)) == len(seqs)

        # Every complete message of the stream is in the history, byte for byte.
        r = await s.http.get(f"/api/sessions/{sid}/messages")
        assert r.status_code == 200 and r.headers["content-type"] == "application/json"
        messages = r.json()["messages"]
        # Each carries its place in the trace; a client's dedup key leaves it out.
        assert [m.pop("tracePosition") for m in messages] == [
            {"fileIndex": 1, "ordinal": i} for i in range(len(messages))
        ]
        history = [json.dumps(m, separators=(",", ":"), ensure_ascii=False) for m in messages]
        assert json.loads(history[0])["type"] == "session_meta"
        streamed = [
            i.data
            for i in items
            if i.message is not None and not i.message.WhichOneof("payload").startswith("partial_")
        ]
        assert streamed == history[1:]


async def test_stream_response_headers_are_the_reference_headers(tmp_path: Path) -> None:
    expected = json.loads((CONFORMANCE / "sse_response_headers.json").read_text())
    async with served(tmp_path) as s:
        sid = await new_session(s)
        async with s.http.stream("GET", f"/api/sessions/{sid}/stream") as r:
            assert dict(r.headers) == expected


async def test_last_event_id_replays_the_gap_or_asks_for_a_resync(tmp_path: Path) -> None:
    async with served(tmp_path) as s:
        sid = await new_session(s)
        items = await collect_task(s, sid, {"prompt": "replay me"})
        buffered = [i.event_id for i in items[1:]]  # items[0] was this subscriber's unicast
        middle = buffered[len(buffered) // 2]
        gap = buffered[buffered.index(middle) + 1 :]

        raw = await read_raw(
            s.http, f"/api/sessions/{sid}/stream", len(gap) + 1, **{"Last-Event-ID": middle}
        )
        frames = frames_of(raw)
        assert [f["id"] for f in frames[: len(gap)]] == gap
        # Then this subscriber's own task_state, with a fresh id.
        after = frames[len(gap)]
        assert (
            after["event"] == "server_event" and json.loads(after["data"])["type"] == "task_state"
        )

        # The same works as a query parameter (EventSource cannot set headers at first connect).
        raw = await read_raw(s.http, f"/api/sessions/{sid}/stream?lastEventId={middle}", 1)
        assert frames_of(raw)[0]["id"] == gap[0]

        for stale in ("deadbeef-3", "garbage", f"{middle.rsplit('-', 1)[0]}-999999"):
            raw = await read_raw(
                s.http, f"/api/sessions/{sid}/stream", 2, **{"Last-Event-ID": stale}
            )
            first, second = frames_of(raw)[:2]
            assert (
                first["event"] == "server_event" and first["data"] == '{"type":"resync_required"}'
            )
            assert json.loads(second["data"])["type"] == "task_state"


async def test_ask_mode_approvals_over_http(tmp_path: Path) -> None:
    async with served(tmp_path) as s:
        sid = await new_session(s)
        items: list[StreamItem] = []
        asked = asyncio.Event()

        async def watch() -> None:
            async for item in read_reference(
                s.http, f"/api/sessions/{sid}/stream", until_idle=True
            ):
                items.append(item)
                if item.server_event_kind == "approval_request":
                    asked.set()

        watcher = asyncio.create_task(watch())
        await until(lambda: items, "the stream's initial task_state")
        r = await s.http.post(
            f"/api/sessions/{sid}/tasks", json={"prompt": "go", "approvalMode": "ask"}
        )
        assert r.status_code == 202
        await asyncio.wait_for(asked.wait(), 5)
        request = next(i for i in items if i.server_event_kind == "approval_request")
        call_id = request.server_event.approval_request.tool_call.tool_call.tool_call_id  # type: ignore[union-attr]

        # A client connecting now is told about the pending approval on connect.
        raw = await read_raw(s.http, f"/api/sessions/{sid}/stream", 2)
        initial = [json.loads(f["data"]) for f in frames_of(raw)[:2]]
        assert initial[0] == {"type": "task_state", "state": "running", "queued": 0}
        assert initial[1]["type"] == "approval_request"
        assert initial[1]["toolCall"]["payload"]["tool_call_id"] == call_id

        bad = await s.http.post(
            f"/api/sessions/{sid}/approvals/{call_id}", json={"decision": "maybe"}
        )
        assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_request"
        unknown = await s.http.post(
            f"/api/sessions/{sid}/approvals/nope", json={"decision": "allow"}
        )
        assert unknown.status_code == 404
        assert unknown.json()["error"]["code"] == "approval_not_found"
        ok = await s.http.post(
            f"/api/sessions/{sid}/approvals/{call_id}", json={"decision": "deny"}
        )
        assert ok.status_code == 204
        await asyncio.wait_for(watcher, 10)
        decisions = [json.loads(i.data)["payload"] for i in items if i.message is not None]
        assert {
            "type": "approval_decision",
            "decision": "deny",
            "tool_call_id": call_id,
        } in decisions


async def test_abort_stops_the_task_and_answers_202_then_204(tmp_path: Path) -> None:
    async with served(tmp_path, pacing=0.05) as s:
        sid = await new_session(s)
        items: list[StreamItem] = []

        async def watch() -> None:
            async for item in read_reference(
                s.http, f"/api/sessions/{sid}/stream", until_idle=True
            ):
                items.append(item)

        watcher = asyncio.create_task(watch())
        await until(lambda: items, "the stream's initial task_state")
        assert (
            await s.http.post(f"/api/sessions/{sid}/tasks", json={"prompt": "slow"})
        ).status_code == 202
        # Abort mid-run: once the engine has begun streaming its first request.
        await until(
            lambda: any(
                i.message is not None and i.message.WhichOneof("payload") == "partial_thinking"
                for i in items
            ),
            "the first streamed delta",
        )
        r = await s.http.post(f"/api/sessions/{sid}/abort", json={"reason": "enough"})
        assert r.status_code == 202
        await asyncio.wait_for(watcher, 10)
        payloads = [json.loads(i.data)["payload"] for i in items if i.message is not None]
        assert payloads[-1] == {"type": "abort", "reason": "enough"}
        assert (await s.http.post(f"/api/sessions/{sid}/abort")).status_code == 204


async def test_dialect_run_streams_the_six_events(tmp_path: Path) -> None:
    async with served(tmp_path) as s:
        events = [ev async for ev in read_dialect(s.http, "/v1/runs", {"prompt": "hi there"})]
        names = [e.event for e in events]
        assert names[0] == "thought" and names[-1] == "done" and names.count("done") == 1
        assert set(names) <= {"thought", "tool_call", "tool_result", "message", "done"}
        call = next(e.data for e in events if e.event == "tool_call")
        assert call["tool"] == "list_workspace" and call["args"] == {"path": "."}
        assert call["call_id"].startswith("call_demo_")
        assert names.index("tool_call") < names.index("tool_result")
        done = events[-1].data
        assert done["status"] == "completed" and done["total_tokens"] > 0
        assert done["run_id"].startswith("run_")
        # The deltas spell the two assistant texts of the trace, a blank line apart.
        (info,) = await s.hub.list_sessions()
        texts = [
            m.text.text
            async for m in await s.hub.history(info.session_id)
            if m.WhichOneof("payload") == "text" and m.text.role == 2
        ]
        assert "".join(e.data["delta"] for e in events if e.event == "message") == "\n\n".join(
            texts
        )


async def test_dialect_run_continues_a_session_and_reports_busy(tmp_path: Path) -> None:
    async with served(tmp_path, pacing=0.05) as s:
        r = await s.http.post("/api/sessions", json={})
        sid = r.json()["session"]["sessionId"]
        stream = read_dialect(s.http, "/v1/runs", {"prompt": "one", "session_id": sid})
        first = await anext(stream)
        assert first.event == "thought"
        busy = await s.http.post("/v1/runs", json={"prompt": "two", "sessionId": sid})
        assert busy.status_code == 409 and busy.json()["error"]["code"] == "task_in_progress"
        rest = [ev async for ev in stream]
        assert rest[-1].event == "done"


async def test_a_dialect_client_that_hangs_up_aborts_its_run(tmp_path: Path) -> None:
    async with served(tmp_path, pacing=0.05) as s:
        async with s.http.stream("POST", "/v1/runs", json={"prompt": "bye"}) as r:
            sid = r.headers["omni-session-id"]
            async for _ in r.aiter_bytes():
                break  # one chunk, then close the connection
        await asyncio.wait_for(s.hub.wait_idle(sid), 5)
        last = [m async for m in await s.hub.history(sid)][-1]
        assert last.WhichOneof("payload") == "abort" and last.abort.reason == "client disconnected"
        await until(lambda: s.logs[0].subscriber_count == 0, "the subscription to be released")


async def test_a_dialect_client_can_detach(tmp_path: Path) -> None:
    async with served(tmp_path, pacing=0.01) as s:
        async with s.http.stream("POST", "/v1/runs", json={"prompt": "x", "detach": True}) as r:
            sid = r.headers["omni-session-id"]
            async for _ in r.aiter_bytes():
                break
        await asyncio.wait_for(s.hub.wait_idle(sid), 10)
        last = [m async for m in await s.hub.history(sid)][-1]
        assert last.WhichOneof("payload") == "request_end"


async def test_closed_streams_release_their_subscriptions(tmp_path: Path) -> None:
    async with served(tmp_path) as s:
        sid = await new_session(s)
        for _ in range(3):
            await read_raw(s.http, f"/api/sessions/{sid}/stream", 1)
        # The server notices the disconnects asynchronously.
        await until(lambda: s.logs[0].subscriber_count == 0, "every subscription to be released")


async def test_heartbeat_is_configurable(tmp_path: Path) -> None:
    async with served(tmp_path, heartbeat=0.1) as s:
        sid = await new_session(s)
        async with s.http.stream("GET", f"/api/sessions/{sid}/stream") as r:
            raw = b""
            async for chunk in r.aiter_bytes():
                raw += chunk
                if b": ping\n\n" in raw:
                    break
        assert raw.endswith(b": ping\n\n")


async def test_bearer_token_via_header_or_query_parameter(tmp_path: Path) -> None:
    async with served(tmp_path, token="s3cret") as s:
        r = await s.http.post("/api/sessions", json={})
        assert r.status_code == 401
        assert r.json()["error"]["code"] == "unauthenticated"
        assert r.headers["www-authenticate"] == "Bearer"
        wrong = await s.http.get("/api/sessions", headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401
        sid = await new_session(s, Authorization="Bearer s3cret")
        raw = await read_raw(s.http, f"/api/sessions/{sid}/stream?access_token=s3cret", 1)
        assert b"task_state" in raw
        # The page is public; it needs the token for everything else.
        assert (await s.http.get("/")).status_code == 200


async def test_cors_allow_list(tmp_path: Path) -> None:
    async with served(tmp_path, cors_origins=["http://app.example"], token="t") as s:
        pre = await s.http.options(
            "/api/sessions",
            headers={
                "Origin": "http://app.example",
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization,content-type",
            },
        )
        assert pre.status_code == 200
        assert pre.headers["access-control-allow-origin"] == "http://app.example"
        other = await s.http.get(
            "/api/sessions", headers={"Origin": "http://evil.example", "Authorization": "Bearer t"}
        )
        assert "access-control-allow-origin" not in other.headers
        ok = await s.http.get(
            "/api/sessions", headers={"Origin": "http://app.example", "Authorization": "Bearer t"}
        )
        assert ok.headers["access-control-allow-origin"] == "http://app.example"


@pytest.mark.parametrize(
    ("body", "status", "code", "needle"),
    [
        (b"{", 400, "invalid_json", "not valid JSON"),
        (b"[]", 400, "invalid_request", "JSON object"),
        (b'{"input":[{"type":"video"}]}', 400, "invalid_request", "input[0].type"),
        (b'{"input":[{"type":"text","text":3}]}', 400, "invalid_request", "input[0].text"),
        (b'{"prompt":"x","thinkingLevel":"huge"}', 400, "invalid_request", "thinkingLevel"),
        (b'{"prompt":"x","approvalMode":"sometimes"}', 400, "invalid_request", "approvalMode"),
        (b"{}", 400, "invalid_request", "input"),
        (b'{"prompt":"' + b"x" * 2048 + b'"}', 413, "body_too_large", "1024 bytes"),
    ],
)
async def test_bad_requests_get_json_errors_naming_the_field(
    tmp_path: Path, body: bytes, status: int, code: str, needle: str
) -> None:
    async with served(tmp_path, max_body_bytes=1024) as s:
        sid = await new_session(s)
        r = await s.http.post(
            f"/api/sessions/{sid}/tasks", content=body, headers={"content-type": "application/json"}
        )
        assert (r.status_code, r.json()["error"]["code"]) == (status, code)
        assert needle in r.json()["error"]["message"]


async def test_a_compressed_body_is_refused_naming_its_encoding(tmp_path: Path) -> None:
    """Bodies are read uncompressed: a gzip one is 415 naming its encoding
    (not "not valid JSON"), and nothing runs."""
    import gzip

    async with served(tmp_path) as s:
        sid = await new_session(s)
        r = await s.http.post(
            f"/api/sessions/{sid}/tasks",
            content=gzip.compress(b'{"prompt": "hi"}'),
            headers={"content-type": "application/json", "content-encoding": "gzip"},
        )
        assert (r.status_code, r.json()["error"]["code"]) == (415, "unsupported_encoding")
        assert "'gzip'" in r.json()["error"]["message"]
        r = await s.http.post(
            f"/api/sessions/{sid}/tasks",
            content=b'{"prompt": "hi"}',
            headers={"content-type": "application/json", "content-encoding": "identity"},
        )
        assert r.status_code == 202


async def test_unknown_sessions_and_routes(tmp_path: Path) -> None:
    async with served(tmp_path) as s:
        for method, path in [
            ("GET", "/api/sessions/nope/stream"),
            ("GET", "/api/sessions/nope/messages"),
            ("POST", "/api/sessions/nope/tasks"),
            ("POST", "/api/sessions/nope/abort"),
        ]:
            r = await s.http.request(method, path, json={"prompt": "x"})
            assert r.status_code == 404, path
            assert r.json()["error"]["code"] == "session_not_found", path
        r = await s.http.get("/nowhere")
        assert r.status_code == 404
        assert r.json() == {"error": {"code": "not_found", "message": "Not Found"}}
        r = await s.http.delete("/api/sessions")
        assert r.status_code == 405 and r.json()["error"]["code"] == "method_not_allowed"


async def test_the_app_mounts_inside_a_users_application(tmp_path: Path) -> None:
    """As docs/sse.md shows: mounted under a prefix beside the user's own routes."""
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Mount, Route

    async def home(_request: Any) -> PlainTextResponse:
        return PlainTextResponse("the user's own page")

    hub = Hub(DemoEngine(), tmp_path / "data")
    user_app = Starlette(
        routes=[Route("/", home), Mount("/agent", app=create_app(hub, token="s3cret"))]
    )
    server = HttpServer(user_app, port=0)
    await server.start()
    try:
        async with httpx.AsyncClient(base_url=server.url, timeout=10) as http:
            assert (await http.get("/")).text == "the user's own page"
            refused = await http.post("/agent/v1/runs", json={"prompt": "hi"})
            assert refused.status_code == 401
            events = [
                ev
                async for ev in read_dialect(
                    http, "/agent/v1/runs?access_token=s3cret", {"prompt": "mounted"}
                )
            ]
            assert events[-1].event == "done" and events[-1].data["status"] == "completed"
            (info,) = await hub.list_sessions()
            listed = await http.get(
                f"/agent/api/sessions/{info.session_id}/messages",
                headers={"authorization": "Bearer s3cret"},
            )
            assert listed.status_code == 200
            messages = listed.json()["messages"]
            assert messages[0]["type"] == "session_meta"  # a trace opens with it
            assert messages[1]["payload"]["text"] == "mounted"
    finally:
        await hub.shutdown()
        await server.stop()


class _Recording(httpx.AsyncBaseTransport):
    """A real HTTP transport that keeps every body byte the client received,
    so a test can wait until the server's heartbeat has gone by."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.raw = bytearray()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        assert isinstance(response.stream, httpx.AsyncByteStream)
        stream: httpx.AsyncByteStream = response.stream

        class Kept(httpx.AsyncByteStream):
            async def __aiter__(inner_self) -> AsyncIterator[bytes]:
                async for chunk in stream:
                    self.raw += chunk
                    yield chunk

            async def aclose(inner_self) -> None:
                await stream.aclose()

        response.stream = Kept()
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


async def test_both_readers_pass_over_heartbeats_after_an_event(tmp_path: Path) -> None:
    # httpx-sse repeats the last id on a `: ping` frame; a reader that took it
    # for an event failed on any stream quiet for the heartbeat period.
    async with served(tmp_path, heartbeat=0.05) as s:
        wire = _Recording()
        async with httpx.AsyncClient(base_url=s.url, transport=wire, timeout=10) as http:
            sid = await new_session(s)
            items: list[StreamItem] = []

            async def watch() -> None:
                url = f"/api/sessions/{sid}/stream"
                async for item in read_reference(http, url, until_idle=True, max_reconnects=0):
                    items.append(item)

            watcher = asyncio.create_task(watch())
            await until(lambda: items, "the stream's initial task_state")
            r = await s.http.post(
                f"/api/sessions/{sid}/tasks", json={"prompt": "go", "approvalMode": "ask"}
            )
            assert r.status_code == 202
            await until(
                lambda: any(i.server_event_kind == "approval_request" for i in items), "the ask"
            )
            mark = len(wire.raw)
            await until(lambda: b": ping\n\n" in wire.raw[mark:], "a heartbeat after the ask")
            request = next(i for i in items if i.server_event_kind == "approval_request")
            call_id = request.server_event.approval_request.tool_call.tool_call.tool_call_id  # type: ignore[union-attr]
            ok = await s.http.post(
                f"/api/sessions/{sid}/approvals/{call_id}", json={"decision": "allow"}
            )
            assert ok.status_code == 204
            await asyncio.wait_for(watcher, 10)
            # Every item is an event the server sent: one per id, each decoded.
            assert all((i.message is None) != (i.server_event is None) for i in items)
            ids = [i.event_id for i in items]
            assert len(ids) == len(set(ids))
            assert json.loads(items[-1].data) == {
                "type": "task_state",
                "state": "idle",
                "queued": 0,
            }

            # The dialect: a heartbeat while its run waits on the approval.
            events: list[DialectEvent] = []

            async def run() -> None:
                body = {"prompt": "again", "approvalMode": "ask", "session_id": sid}
                async for event in read_dialect(http, "/v1/runs", body):
                    events.append(event)

            runner = asyncio.create_task(run())
            await until(
                lambda: any(e.event == DialectEventName.APPROVAL_REQUEST for e in events),
                "the dialect's ask",
            )
            mark = len(wire.raw)
            await until(lambda: b": ping\n\n" in wire.raw[mark:], "a heartbeat after the ask")
            asked = next(e for e in events if e.event == DialectEventName.APPROVAL_REQUEST)
            answer = asked.data["answer"]
            ok = await s.http.post(answer["path"], json={"decision": "allow"})
            assert ok.status_code == 204, ok.text
            await asyncio.wait_for(runner, 10)
            assert events[-1].event == DialectEventName.DONE
            assert events[-1].data["status"] == "completed"
