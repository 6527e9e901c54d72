"""The bodies of the routes we mirror, pinned to the reference server's types.

The expectations are written from the reference's documented fields
(``packages/server/src/api/types.ts``, ``http/errors.ts``,
``http/routes/sessions.ts`` at 399ca0fc): ``ErrorBody``, ``SessionInfo``,
``SessionResponse``/``SessionsResponse``/``SessionCreateResponse``,
``TaskCreateResponse`` and the approval route. A real hub and a real uvicorn
server answer them over HTTP.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from omni_grpc.client.sse import StreamItem, read_reference
from omni_grpc.engines.demo import DemoEngine
from omni_grpc.runtime.approvals import ApprovalMode
from omni_grpc.runtime.hub import Hub
from omni_grpc.transport.sse.app import create_app
from omni_grpc.transport.sse.server import HttpServer

# SessionInfo in the reference's declaration order; `source` and `tracePath`
# are optional there, `thinkingLevel` and `title` too (a bridge sets neither).
SESSION_FIELDS = [
    "sessionId",
    "projectId",
    "agentId",
    "provider",
    "modelId",
    "workspace",
    "approvalMode",
    "createdAt",
    "lastActiveAt",
    "status",
    "pendingApprovalCount",
    "pendingFollowUpCount",
    "hasTrace",
    "archived",
]
# Ours, after the reference's (additive only).
OUR_FIELDS = ["messageCount", "lastEventId"]


@asynccontextmanager
async def served(
    data: Path,
    *,
    pacing: float = 0.0,
    approval: ApprovalMode = ApprovalMode.ALLOW_ALL,
    max_body_bytes: int = 1 << 20,
) -> AsyncIterator[tuple[Hub, httpx.AsyncClient]]:
    hub = Hub(DemoEngine(pacing=pacing), data, default_approval=approval)
    server = HttpServer(create_app(hub, max_body_bytes=max_body_bytes), port=0)
    await server.start()
    try:
        async with httpx.AsyncClient(base_url=server.url, timeout=10) as http:
            yield hub, http
    finally:
        await hub.shutdown()
        await server.stop()


def assert_error(r: httpx.Response, status: int, code: str) -> str:
    """The reference's ErrorBody, exactly: {"error": {"code", "message"}}."""
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/json"
    body = r.json()
    assert list(body) == ["error"], body
    assert list(body["error"]) == ["code", "message"], body
    assert body["error"]["code"] == code, body
    message = body["error"]["message"]
    assert isinstance(message, str) and message, body
    return str(message)


def assert_session_info(info: dict[str, Any], *, trace_path: bool) -> None:
    expected = list(SESSION_FIELDS)
    if "source" in info:
        expected.insert(expected.index("createdAt"), "source")
    if trace_path:
        expected.append("tracePath")
    assert list(info) == expected + OUR_FIELDS
    for key in ("sessionId", "projectId", "agentId", "provider", "modelId", "workspace"):
        assert isinstance(info[key], str) and info[key], key
    assert info["approvalMode"] in ("allow-all", "deny-all", "read-only", "always-ask")
    assert info["status"] in ("idle", "running", "compacting")
    for key in ("pendingApprovalCount", "pendingFollowUpCount"):
        assert isinstance(info[key], int) and info[key] >= 0
    assert isinstance(info["hasTrace"], bool) and info["archived"] is False
    assert info["createdAt"].endswith("Z") and info["lastActiveAt"].endswith("Z")


async def create(http: httpx.AsyncClient, body: dict[str, Any] | None = None) -> dict[str, Any]:
    r = await http.post("/api/sessions", json={} if body is None else body)
    assert r.status_code == 201, r.text
    assert list(r.json()) == ["session"]
    info: dict[str, Any] = r.json()["session"]
    return info


async def run_task(http: httpx.AsyncClient, sid: str, body: dict[str, Any]) -> list[StreamItem]:
    items: list[StreamItem] = []
    connected = asyncio.Event()

    async def watch() -> None:
        async for item in read_reference(http, f"/api/sessions/{sid}/stream", until_idle=True):
            items.append(item)
            connected.set()

    watcher = asyncio.create_task(watch())
    await asyncio.wait_for(connected.wait(), 5)
    r = await http.post(f"/api/sessions/{sid}/tasks", json=body)
    assert r.status_code == 202, r.text
    assert r.json() == {"sessionId": sid, "queued": False}  # the reference's TaskCreateResponse
    await asyncio.wait_for(watcher, 15)
    return items


# ---- sessions ----------------------------------------------------------------------


async def test_session_bodies_carry_the_reference_session_info(tmp_path: Path) -> None:
    async with served(tmp_path / "data") as (_hub, http):
        created = await create(http)
        assert_session_info(created, trace_path=False)
        sid = created["sessionId"]
        assert (created["projectId"], created["agentId"]) == ("default", "default")
        # The demo engine's session_meta says who answers and where.
        assert (created["provider"], created["modelId"]) == ("omni-grpc", "demo")
        assert Path(created["workspace"]).is_dir()
        assert created["approvalMode"] == "allow-all"
        assert created["status"] == "idle" and created["hasTrace"] is False
        assert created["pendingApprovalCount"] == 0 and created["pendingFollowUpCount"] == 0
        assert created["lastActiveAt"] == created["createdAt"]

        one = await http.get(f"/api/sessions/{sid}")
        assert one.status_code == 200 and list(one.json()) == ["session"]
        assert one.json()["session"] == created  # no trace yet: no tracePath

        await run_task(http, sid, {"input": [{"type": "text", "text": "hello"}]})
        after = (await http.get(f"/api/sessions/{sid}")).json()["session"]
        assert_session_info(after, trace_path=True)
        assert after["hasTrace"] is True and after["status"] == "idle"
        trace = Path(after["tracePath"])
        assert trace.is_absolute() and trace.name == f"{sid}_001.jsonl" and trace.is_file()
        assert after["lastActiveAt"] >= after["createdAt"]
        assert after["messageCount"] == len(trace.read_text().splitlines())
        assert after["lastEventId"] is not None

        listed = await http.get("/api/sessions")
        assert list(listed.json()) == ["sessions"]
        (row,) = listed.json()["sessions"]
        assert_session_info(row, trace_path=False)  # the list never carries tracePath
        assert row == {k: v for k, v in after.items() if k != "tracePath"}


async def test_session_info_after_a_restart_comes_from_the_trace(tmp_path: Path) -> None:
    async with served(tmp_path / "data") as (_hub, http):
        sid = (await create(http))["sessionId"]
        await run_task(http, sid, {"prompt": "before the restart"})
        before = (await http.get(f"/api/sessions/{sid}")).json()["session"]
    async with served(tmp_path / "data") as (_hub, http):
        after = (await http.get(f"/api/sessions/{sid}")).json()["session"]
        assert_session_info(after, trace_path=True)
        # What the trace says survives; the new process has published nothing
        # yet, so there is no event id to resume from (docs/sse.md).
        for key in ("sessionId", "provider", "modelId", "workspace", "createdAt", "tracePath"):
            assert after[key] == before[key], key
        assert after["hasTrace"] is True and after["lastEventId"] is None
        assert after["messageCount"] == before["messageCount"]


async def test_running_and_pending_approvals_show_in_session_info(tmp_path: Path) -> None:
    async with served(tmp_path / "data", approval=ApprovalMode.ASK) as (hub, http):
        created = await create(http)
        assert created["approvalMode"] == "always-ask"  # the reference's name for ask
        sid = created["sessionId"]
        asked = asyncio.Event()
        call_ids: list[str] = []

        async def watch() -> None:
            async for item in read_reference(http, f"/api/sessions/{sid}/stream", until_idle=True):
                if item.server_event_kind == "approval_request":
                    call = item.server_event.approval_request.tool_call  # type: ignore[union-attr]
                    call_ids.append(call.tool_call.tool_call_id)
                    asked.set()

        watcher = asyncio.create_task(watch())
        await asyncio.sleep(0.1)
        r = await http.post(f"/api/sessions/{sid}/tasks", json={"prompt": "ask me"})
        assert r.status_code == 202
        await asyncio.wait_for(asked.wait(), 5)
        info = (await http.get(f"/api/sessions/{sid}")).json()["session"]
        assert info["status"] == "running" and info["pendingApprovalCount"] == 1
        listed = (await http.get("/api/sessions")).json()["sessions"]
        assert [s["pendingApprovalCount"] for s in listed] == [1]

        ok = await http.post(
            f"/api/sessions/{sid}/approvals/{call_ids[0]}", json={"decision": "allow"}
        )
        assert ok.status_code == 204 and ok.content == b""
        # Decided: the same call is no longer an approval that exists.
        again = await http.post(
            f"/api/sessions/{sid}/approvals/{call_ids[0]}", json={"decision": "deny"}
        )
        assert_error(again, 404, "approval_not_found")
        await asyncio.wait_for(watcher, 15)
        await hub.wait_idle(sid)
        info = (await http.get(f"/api/sessions/{sid}")).json()["session"]
        assert info["status"] == "idle" and info["pendingApprovalCount"] == 0


@pytest.mark.parametrize(
    ("body", "code", "needle"),
    [
        ({"approvalMode": "sometimes"}, "invalid_request", "approvalMode"),
        ({"workspace": "/tmp"}, "invalid_request", "workspace"),
        ({"workspace": 3}, "invalid_request", "workspace"),
        ({"provider": "omni-grpc"}, "invalid_request", "modelId"),
        ({"modelId": "demo"}, "invalid_request", "modelId"),
        ({"provider": "openai", "modelId": "gpt-5"}, "invalid_request", "gpt-5"),
        ({"provider": "", "modelId": "demo"}, "invalid_request", "provider"),
    ],
)
async def test_session_options_a_bridge_cannot_honour_are_refused(
    tmp_path: Path, body: dict[str, Any], code: str, needle: str
) -> None:
    async with served(tmp_path / "data") as (hub, http):
        r = await http.post("/api/sessions", json=body)
        assert needle in assert_error(r, 400, code)
        assert await hub.list_sessions() == []  # nothing was created


async def test_session_options_that_match_are_accepted(tmp_path: Path) -> None:
    async with served(tmp_path / "data") as (_hub, http):
        info = await create(
            http, {"provider": "omni-grpc", "modelId": "demo", "approvalMode": "allow-all"}
        )
        assert (info["provider"], info["modelId"], info["approvalMode"]) == (
            "omni-grpc",
            "demo",
            "allow-all",
        )
    async with served(tmp_path / "ask", approval=ApprovalMode.ASK) as (_hub, http):
        assert (await create(http, {"approvalMode": "always-ask"}))["approvalMode"] == "always-ask"


# ---- tasks ---------------------------------------------------------------------------


async def test_tasks_answer_202_with_the_session_id_and_refuse_a_queue(tmp_path: Path) -> None:
    async with served(tmp_path / "data", pacing=0.05) as (hub, http):
        sid = (await create(http))["sessionId"]
        # queueIfBusy on an idle session just starts the task.
        r = await http.post(f"/api/sessions/{sid}/tasks", json={"prompt": "a", "queueIfBusy": True})
        assert r.status_code == 202 and r.json() == {"sessionId": sid, "queued": False}
        busy = await http.post(f"/api/sessions/{sid}/tasks", json={"prompt": "b"})
        assert_error(busy, 409, "task_in_progress")
        queued = await http.post(
            f"/api/sessions/{sid}/tasks", json={"prompt": "c", "queueIfBusy": True}
        )
        assert "queueIfBusy" in assert_error(queued, 409, "queue_not_supported")
        bad = await http.post(
            f"/api/sessions/{sid}/tasks", json={"prompt": "d", "queueIfBusy": "yes"}
        )
        assert "queueIfBusy" in assert_error(bad, 400, "invalid_request")
        await hub.wait_idle(sid)
        prompts = [
            m.text.text
            async for m in await hub.history(sid)
            if m.WhichOneof("payload") == "text" and m.text.role == 1
        ]
        assert prompts == ["a"]  # nothing was queued behind the running task


async def test_task_input_takes_the_reference_image_url_key(tmp_path: Path) -> None:
    async with served(tmp_path / "data") as (hub, http):
        sid = (await create(http))["sessionId"]
        url = "https://example.com/cat.png"
        await run_task(
            http,
            sid,
            {"input": [{"type": "text", "text": "look"}, {"type": "image_url", "imageUrl": url}]},
        )
        images = [
            m.image_url.image_url async for m in await hub.history(sid) if m.HasField("image_url")
        ]
        assert images == [url]
        bad = await http.post(
            f"/api/sessions/{sid}/tasks", json={"input": [{"type": "image_url", "imageUrl": ""}]}
        )
        assert "input[0].imageUrl" in assert_error(bad, 400, "invalid_request")


# ---- every error path of every mirrored route -----------------------------------------


async def test_every_route_answers_errors_in_the_reference_shape(tmp_path: Path) -> None:
    async with served(tmp_path / "data", approval=ApprovalMode.ASK, pacing=0.02) as (_hub, http):
        sid = (await create(http))["sessionId"]
        missing = "session-none"
        for method, path in [
            ("GET", f"/api/sessions/{missing}"),
            ("POST", f"/api/sessions/{missing}/tasks"),
            ("GET", f"/api/sessions/{missing}/stream"),
            ("GET", f"/api/sessions/{missing}/messages"),
            ("POST", f"/api/sessions/{missing}/approvals/call_1"),
            ("POST", f"/api/sessions/{missing}/abort"),
        ]:
            r = await http.request(method, path, json={"prompt": "x", "decision": "allow"})
            assert missing in assert_error(r, 404, "session_not_found"), path

        big = b'{"prompt":"' + b"x" * (1 << 20) + b'"}'
        for body, code in [(b"{", "invalid_json"), (b"[1]", "invalid_request"), (big, "")]:
            for path in [
                "/api/sessions",
                f"/api/sessions/{sid}/tasks",
                f"/api/sessions/{sid}/approvals/call_1",
                f"/api/sessions/{sid}/abort",
                "/v1/runs",
            ]:
                r = await http.post(
                    path, content=body, headers={"content-type": "application/json"}
                )
                if code:
                    assert_error(r, 400, code)
                else:
                    assert_error(r, 413, "body_too_large")

        r = await http.post(f"/api/sessions/{sid}/abort", json={"reason": 3})
        assert "reason" in assert_error(r, 400, "invalid_request")
        upload = {"type": "file", "fileName": "a.txt", "dataUrl": "data:text/plain;base64,YQ=="}
        r = await http.post(f"/api/sessions/{sid}/tasks", json={"input": [upload]})
        assert "not supported" in assert_error(r, 400, "invalid_request")

        # Approvals: allow or deny only; an unknown call is approval_not_found.
        for decision in ("forbidden", "maybe", None, 1):
            r = await http.post(
                f"/api/sessions/{sid}/approvals/call_1", json={"decision": decision}
            )
            assert "decision" in assert_error(r, 400, "invalid_request")
        r = await http.post(f"/api/sessions/{sid}/approvals/call_1", json={"decision": "allow"})
        assert_error(r, 404, "approval_not_found")

        # The dialect's HTTP refusals use the same shape.
        r = await http.post("/v1/runs", json={"prompt": "x", "session_id": missing})
        assert_error(r, 404, "session_not_found")
        r = await http.post("/v1/runs", json={"prompt": "x", "detach": "no"})
        assert "detach" in assert_error(r, 400, "invalid_request")
        r = await http.post("/v1/runs", json={})
        assert_error(r, 400, "invalid_request")
        started = await http.post(f"/api/sessions/{sid}/tasks", json={"prompt": "run"})
        assert started.status_code == 202
        r = await http.post("/v1/runs", json={"prompt": "x", "session_id": sid})
        assert_error(r, 409, "task_in_progress")
        await http.post(f"/api/sessions/{sid}/abort", json={})

        assert_error(await http.get("/nowhere"), 404, "not_found")
        assert_error(await http.put("/api/sessions"), 405, "method_not_allowed")


async def test_an_unexpected_failure_is_500_internal_with_no_detail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with served(tmp_path / "data") as (hub, http):

        def broken() -> list[Any]:
            raise RuntimeError("secret detail at /srv/private/path")

        monkeypatch.setattr(hub, "list_sessions", broken)
        r = await http.get("/api/sessions")
        assert r.status_code == 500
        assert r.json() == {"error": {"code": "internal", "message": "Internal server error."}}
        assert b"secret" not in r.content and b"RuntimeError" not in r.content


async def test_unauthenticated_requests_get_the_reference_shape(tmp_path: Path) -> None:
    hub = Hub(DemoEngine(), tmp_path / "data")
    server = HttpServer(create_app(hub, token="s3cret"), port=0)
    await server.start()
    try:
        async with httpx.AsyncClient(base_url=server.url, timeout=10) as http:
            for method, path in [
                ("GET", "/api/sessions"),
                ("POST", "/api/sessions"),
                ("GET", "/api/sessions/x/messages"),
                ("POST", "/v1/runs"),
            ]:
                r = await http.request(method, path)
                assert_error(r, 401, "unauthenticated")
                assert r.headers["www-authenticate"] == "Bearer"
    finally:
        await hub.shutdown()
        await server.stop()
