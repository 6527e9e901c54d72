"""The reference web client's session routes: project/agent-scoped creation and
listing, the session-level approval mode (POST and PATCH, bounded by the
client modes, seen by every replica), the fixed answers of goal, processes and
retry-now, and a Date header on every JSON answer."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from omni_grpc.client.sse import StreamItem, read_reference
from omni_grpc.engines.demo import DemoEngine
from omni_grpc.runtime.approvals import ApprovalMode
from omni_grpc.runtime.backend import Backend
from omni_grpc.runtime.hub import Hub
from omni_grpc.transport.sse.app import create_app
from omni_grpc.transport.sse.server import HttpServer

AGENT = "/api/projects/default/agents/default/sessions"
WAIT = 30.0


@asynccontextmanager
async def served(
    tmp_path: Path, name: str = "a", backend: Backend | None = None, **hub_options: Any
) -> AsyncIterator[tuple[Hub, httpx.AsyncClient]]:
    hub = Hub(DemoEngine(), tmp_path / "data", backend=backend, **hub_options)
    server = HttpServer(create_app(hub), port=0)
    await server.start()
    try:
        async with httpx.AsyncClient(base_url=server.url, timeout=WAIT) as http:
            yield hub, http
    finally:
        await hub.shutdown()
        await server.stop()


async def task_events(http: httpx.AsyncClient, sid: str, decide: str | None) -> list[StreamItem]:
    """Runs one task with no mode of its own; answers each ask with ``decide``."""
    items: list[StreamItem] = []
    stream = read_reference(http, f"/api/sessions/{sid}/stream", until_idle=True)

    async def run() -> None:
        await anext(stream)  # connected
        started = await http.post(f"/api/sessions/{sid}/tasks", json={"prompt": "hi"})
        assert started.status_code == 202, started.text
        assert started.json() == {"sessionId": sid, "queued": False}
        async for item in stream:
            items.append(item)
            if item.server_event_kind == "approval_request":
                assert decide is not None, "the task asked, under a mode that never asks"
                assert item.server_event is not None
                call_id = item.server_event.approval_request.tool_call.tool_call.tool_call_id
                answer = await http.post(
                    f"/api/sessions/{sid}/approvals/{call_id}", json={"decision": decide}
                )
                assert answer.status_code == 204

    await asyncio.wait_for(run(), WAIT)
    return items


def asked(items: list[StreamItem]) -> bool:
    return any(i.server_event_kind == "approval_request" for i in items)


async def test_the_reference_client_creates_and_lists_sessions_under_the_default_agent(
    tmp_path: Path,
) -> None:
    async with served(tmp_path) as (_, http):
        created = await http.post(AGENT, json={})
        assert created.status_code == 201, created.text
        session = created.json()["session"]
        assert (session["projectId"], session["agentId"]) == ("default", "default")
        listed = await http.get(AGENT)
        assert [s["sessionId"] for s in listed.json()["sessions"]] == [session["sessionId"]]
        for path, code in (
            ("/api/projects/other/agents/default/sessions", "project_not_found"),
            ("/api/projects/default/agents/other/sessions", "agent_not_found"),
        ):
            for refused in (await http.post(path, json={}), await http.get(path)):
                assert refused.status_code == 404
                assert refused.json()["error"]["code"] == code


@pytest.mark.parametrize("route", ["/api/sessions", AGENT])
async def test_a_session_created_in_always_ask_mode_asks(tmp_path: Path, route: str) -> None:
    async with served(tmp_path) as (_, http):  # the server's own mode: allow-all
        created = await http.post(route, json={"approvalMode": "always-ask"})
        assert created.status_code == 201, created.text
        session = created.json()["session"]
        assert session["approvalMode"] == "always-ask"
        sid = session["sessionId"]
        items = await task_events(http, sid, "deny")
        assert asked(items)
        got = await http.get(f"/api/sessions/{sid}")
        assert got.json()["session"]["approvalMode"] == "always-ask"
        # A session without a mode of its own follows the server's.
        plain = (await http.post(route, json={})).json()["session"]
        assert plain["approvalMode"] == "allow-all"
        assert not asked(await task_events(http, plain["sessionId"], None))


async def test_patch_changes_the_mode_of_the_next_call(tmp_path: Path) -> None:
    async with served(tmp_path) as (_, http):
        sid = (await http.post(AGENT, json={})).json()["session"]["sessionId"]
        assert not asked(await task_events(http, sid, None))
        patched = await http.patch(f"/api/sessions/{sid}", json={"approvalMode": "always-ask"})
        assert patched.status_code == 200, patched.text
        assert patched.json()["session"]["approvalMode"] == "always-ask"
        assert asked(await task_events(http, sid, "allow"))
        patched = await http.patch(f"/api/sessions/{sid}", json={"approvalMode": "deny-all"})
        assert patched.json()["session"]["approvalMode"] == "deny-all"
        items = await task_events(http, sid, None)
        outputs = [i.data for i in items if '"tool_call_output"' in i.data]
        assert outputs and "Tool call denied by user." in outputs[0]


async def test_a_restart_keeps_each_sessions_own_mode(tmp_path: Path) -> None:
    # The memory backend's index is gone after a restart: the mode comes back
    # from beside the trace, or a session in "ask" would run in the server's.
    async with served(tmp_path) as (_, http):
        asking = (await http.post(AGENT, json={"approvalMode": "always-ask"})).json()["session"]
        changed = (await http.post(AGENT, json={})).json()["session"]
        patched = await http.patch(
            f"/api/sessions/{changed['sessionId']}", json={"approvalMode": "deny-all"}
        )
        assert patched.status_code == 200, patched.text
        plain = (await http.post(AGENT, json={})).json()["session"]
    async with served(tmp_path) as (hub, http):
        await hub.restore()
        modes = {
            s["sessionId"]: s["approvalMode"] for s in (await http.get(AGENT)).json()["sessions"]
        }
        assert modes == {
            asking["sessionId"]: "always-ask",
            changed["sessionId"]: "deny-all",
            plain["sessionId"]: "allow-all",  # none of its own: the server's
        }
        assert asked(await task_events(http, asking["sessionId"], "deny"))
        # Deleted, the session's mode goes with its trace.
        saved = list((tmp_path / "data" / "traces").glob(f"*/*{asking['sessionId']}*.mode"))
        assert [p.read_text() for p in saved] == ["ask"]
        deleted = await http.delete(f"/api/sessions/{asking['sessionId']}?deleteTrace=true")
        assert deleted.status_code == 204, deleted.text
    assert not list((tmp_path / "data" / "traces").glob(f"*/*{asking['sessionId']}*.mode"))


async def test_patch_names_what_it_cannot_change(tmp_path: Path) -> None:
    async with served(tmp_path) as (_, http):
        sid = (await http.post(AGENT, json={})).json()["session"]["sessionId"]
        for body, code, field in (
            ({}, "no_update", "approvalMode"),
            ({"approvalMode": "sometimes"}, "invalid_request", "approvalMode"),
            ({"title": "x"}, "invalid_request", "title"),
            ({"thinkingLevel": "high"}, "invalid_request", "thinkingLevel"),
        ):
            refused = await http.patch(f"/api/sessions/{sid}", json=body)
            assert refused.status_code == 400, body
            assert refused.json()["error"]["code"] == code
            assert field in refused.json()["error"]["message"]
        missing = await http.patch("/api/sessions/nope", json={"approvalMode": "deny-all"})
        assert missing.status_code == 404


async def test_the_session_mode_is_bounded_by_the_client_modes(tmp_path: Path) -> None:
    only = (ApprovalMode.ALLOW_ALL, ApprovalMode.DENY_ALL)
    async with served(tmp_path, client_modes=only) as (_, http):
        for route in ("/api/sessions", AGENT):
            refused = await http.post(route, json={"approvalMode": "always-ask"})
            assert refused.status_code == 403
            assert refused.json()["error"]["code"] == "approval_mode_not_allowed"
        sid = (await http.post(AGENT, json={"approvalMode": "deny-all"})).json()["session"]
        refused = await http.patch(
            f"/api/sessions/{sid['sessionId']}", json={"approvalMode": "always-ask"}
        )
        assert refused.status_code == 403
        assert (await http.get(AGENT)).json()["sessions"][0]["approvalMode"] == "deny-all"


async def test_every_replica_sees_the_session_mode(
    tmp_path: Path, make_backend: Callable[..., Backend], backend_kind: str
) -> None:
    if backend_kind == "memory":
        pytest.skip("one process: replicas share state through Redis")
    async with (
        served(tmp_path, backend=make_backend()) as (_, a),
        served(tmp_path, backend=make_backend()) as (_, b),
    ):
        sid = (await a.post(AGENT, json={})).json()["session"]["sessionId"]
        await a.patch(f"/api/sessions/{sid}", json={"approvalMode": "always-ask"})
        assert (await b.get(f"/api/sessions/{sid}")).json()["session"]["approvalMode"] == (
            "always-ask"
        )
        assert asked(await task_events(b, sid, "allow"))


async def test_goal_processes_and_retry_now_answer_as_for_a_plain_session(tmp_path: Path) -> None:
    async with served(tmp_path) as (_, http):
        sid = (await http.post(AGENT, json={})).json()["session"]["sessionId"]
        assert (await http.get(f"/api/sessions/{sid}/goal")).json() == {"goal": None}
        assert (await http.get(f"/api/sessions/{sid}/processes")).json() == {"processes": []}
        retried = await http.post(f"/api/sessions/{sid}/retry-now", json={})
        assert retried.json() == {"skipped": False}
        for method, path in (("GET", "goal"), ("GET", "processes"), ("POST", "retry-now")):
            missing = await http.request(method, f"/api/sessions/nope/{path}", json={})
            assert missing.status_code == 404
            assert missing.json()["error"]["code"] == "session_not_found"


async def test_every_json_answer_has_a_date_and_the_stream_none(tmp_path: Path) -> None:
    async with served(tmp_path) as (_, http):
        created = await http.post(AGENT, json={})
        sid = created.json()["session"]["sessionId"]
        answers = [
            created,
            await http.get("/api/sessions"),
            await http.get(f"/api/sessions/{sid}/messages"),
            await http.get(f"/api/sessions/{sid}/goal"),
            await http.get("/api/sessions/nope"),  # 404
            await http.post(f"/api/sessions/{sid}/tasks", json={"input": 3}),  # 400
            await http.post(f"/api/sessions/{sid}/abort", json={}),  # 204
        ]
        for answer in answers:
            date = answer.headers.get("date")
            assert date is not None, (answer.request.url, answer.status_code)
            parsed = parsedate_to_datetime(date)
            assert parsed.tzinfo is not None and date.endswith(" GMT")
        async with http.stream("GET", f"/api/sessions/{sid}/stream") as stream:
            assert "date" not in stream.headers
