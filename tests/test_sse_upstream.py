"""``--engine sse+http://``: a reference SSE server as the engine of another hub.

The upstream is ``tests/fakes/reference_server.py``, which implements the
reference server's routes and bodies as its code does (not omni-grpc's shim):
sessions only at ``/api/projects/:p/agents/:a/sessions``, the approval mode on
the session, ``imageUrl`` image parts, strict validation.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from omni_grpc.convert import message_from_dict
from omni_grpc.engines.loader import EngineLoadError, load_engine
from omni_grpc.engines.sse_upstream import SseUpstreamEngine
from omni_grpc.protocol import image_url, user_text
from omni_grpc.runtime.approvals import ApprovalMode
from omni_grpc.runtime.bodies import is_task_end
from omni_grpc.runtime.hub import Hub, RunRequest
from omni_grpc.transport.sse.server import HttpServer
from tests.fakes.reference_server import ABORT_REASON, ReferenceServer

WAIT = 30.0  # a safety net against hangs, never the thing a test checks


@asynccontextmanager
async def reference(**kw: Any) -> AsyncIterator[tuple[ReferenceServer, str]]:
    fake = ReferenceServer(**kw)
    server = HttpServer(fake.app, port=0)
    await server.start()
    try:
        yield fake, server.url
    finally:
        await server.stop()


def payloads(datas: list[bytes]) -> list[dict[str, Any]]:
    return [obj["payload"] for obj in map(json.loads, datas) if "payload" in obj]


async def run_locally(
    local: Hub,
    input: list[dict[str, Any]],
    *,
    mode: ApprovalMode | None = None,
    decide: str | None = None,
    on_event: Any = None,
) -> tuple[str, list[bytes]]:
    """One local run to its end: (session id, every event's data)."""
    sid, sub = await local.run(
        RunRequest(input=[message_from_dict(m) for m in input], approval_mode=mode)
    )
    seen: list[bytes] = []

    async def read() -> None:
        async for event in sub:
            seen.append(event.data)
            ev = event.server_event
            if decide and ev is not None and ev.WhichOneof("kind") == "approval_request":
                call_id = ev.approval_request.tool_call.tool_call.tool_call_id
                await local.approve(sid, call_id, decide)
            if on_event is not None:
                await on_event(sid, len(seen))
            if is_task_end(event):
                return

    await asyncio.wait_for(read(), WAIT)
    return sid, seen


def routes(fake: ReferenceServer) -> list[tuple[str, str]]:
    return [(method, path) for method, path, _ in fake.requests]


def bodies(fake: ReferenceServer, method: str, suffix: str) -> list[Any]:
    return [b for m, p, b in fake.requests if m == method and p.endswith(suffix)]


async def test_sessions_are_created_on_the_reference_route_in_ask_mode(tmp_path: Path) -> None:
    async with reference() as (fake, url):
        local = Hub(load_engine(f"sse+{url}", {}), tmp_path / "local")
        try:
            sid, seen = await run_locally(local, [user_text("hi")])
            _, again = await local.run(
                RunRequest(input=[message_from_dict(user_text("again"))], session_id=sid)
            )
            async for event in again:
                if is_task_end(event):
                    break
        finally:
            await local.shutdown()
    assert ("POST", "/api/sessions") not in routes(fake)
    # One upstream session for the local one, created in the reference's ask mode.
    assert bodies(fake, "POST", "/api/projects/default/agents/default/sessions") == [
        {"approvalMode": "always-ask"}
    ]
    [upstream] = fake.sessions.values()
    # The task bodies are the reference's TaskCreateRequest: no approval mode.
    assert bodies(fake, "POST", "/tasks") == [
        {"input": [{"type": "text", "text": "hi"}]},
        {"input": [{"type": "text", "text": "again"}]},
    ]
    # Under the server's allow-all policy the upstream asked, and was allowed.
    assert bodies(fake, "POST", "/approvals/call_1") == [{"decision": "allow"}]
    assert upstream.info["approvalMode"] == "always-ask"
    kinds = [p["type"] for p in payloads(seen)]
    assert kinds[0] == "text" and kinds[-1] == "request_end"
    assert "tool_call_output" in kinds and "approval_decision" in kinds


@pytest.mark.parametrize("decision", ["allow", "deny"])
async def test_ask_mode_is_answered_by_the_local_hub(tmp_path: Path, decision: str) -> None:
    async with reference() as (fake, url):
        local = Hub(SseUpstreamEngine(f"sse+{url}"), tmp_path / "local")
        try:
            _, seen = await run_locally(
                local, [user_text("hi")], mode=ApprovalMode.ASK, decide=decision
            )
        finally:
            await local.shutdown()
    [call_id] = [p["tool_call_id"] for p in payloads(seen) if p["type"] == "tool_call"]
    assert bodies(fake, "POST", f"/approvals/{call_id}") == [{"decision": decision}]
    recorded = next(p for p in payloads(seen) if p["type"] == "approval_decision")
    assert recorded["decision"] == decision
    output = next(p for p in payloads(seen) if p["type"] == "tool_call_output")
    if decision == "deny":
        assert output["stop_reason"] == "aborted"
        assert output["output"] == "Tool call denied by user."
    else:
        assert output["output"] == "(the workspace is empty)"
    # The upstream's input echo is not repeated: the prompt appears once.
    users = [p for p in payloads(seen) if p.get("role") == "user" and p["type"] == "text"]
    assert len(users) == 1


async def test_image_parts_use_the_reference_key(tmp_path: Path) -> None:
    url_in = "data:image/png;base64,iVBORw0KGgo="
    async with reference() as (fake, url):
        local = Hub(SseUpstreamEngine(f"sse+{url}"), tmp_path / "local")
        try:
            _, seen = await run_locally(local, [user_text("look"), image_url(url_in)])
        finally:
            await local.shutdown()
    assert bodies(fake, "POST", "/tasks") == [
        {"input": [{"type": "text", "text": "look"}, {"type": "image_url", "imageUrl": url_in}]}
    ]
    assert payloads(seen)[-1]["type"] == "request_end"


async def test_abort_is_relayed_upstream(tmp_path: Path) -> None:
    async with reference() as (fake, url):
        fake.hold_answer = asyncio.Event()  # the upstream run waits for the abort
        local = Hub(SseUpstreamEngine(f"sse+{url}"), tmp_path / "local")

        seen_so_far: list[bytes] = []
        try:
            sid, sub = await local.run(RunRequest(input=[message_from_dict(user_text("slow"))]))

            async def read() -> None:
                async for event in sub:
                    seen_so_far.append(event.data)
                    # The upstream holds its answer back; abort once the tool ran.
                    if b'"tool_call_output"' in event.data:
                        assert await local.abort(sid, "stop it")
                    if is_task_end(event):
                        return

            await asyncio.wait_for(read(), WAIT)
        finally:
            await local.shutdown()
    assert bodies(fake, "POST", "/abort") != []
    [upstream] = fake.sessions.values()
    assert upstream.info["status"] == "idle" and upstream.running is None
    last = payloads(seen_so_far)[-1]
    assert last == {"type": "abort", "reason": ABORT_REASON}


async def test_a_refused_task_fails_the_run_as_messages(tmp_path: Path) -> None:
    async with reference(projects={}) as (_, url):  # no agent to create sessions in
        local = Hub(SseUpstreamEngine(f"sse+{url}"), tmp_path / "local")
        try:
            _, seen = await run_locally(local, [user_text("x")])
        finally:
            await local.shutdown()
    last = payloads(seen)[-1]
    assert last["type"] == "abort"
    assert "/api/projects/default/agents/default/sessions answered 404" in str(last["reason"])


async def test_an_unreachable_upstream_fails_the_run_as_messages(tmp_path: Path) -> None:
    async with reference() as (_, url):
        dead = url  # the port is closed once the server stops
    local = Hub(SseUpstreamEngine(f"sse+{dead}"), tmp_path / "local")
    try:
        _, seen = await run_locally(local, [user_text("x")])
    finally:
        await local.shutdown()
    last = payloads(seen)[-1]
    assert last["type"] == "abort"
    assert str(last["reason"]).startswith("engine error: POST http://127.0.0.1:")
    assert "/api/projects/default/agents/default/sessions" in str(last["reason"])


async def test_the_project_and_agent_are_options(tmp_path: Path) -> None:
    async with reference(projects={"p1": {"coder"}}) as (fake, url):
        local = Hub(load_engine(f"sse+{url}", {"project": "p1", "agent": "coder"}), tmp_path / "l")
        try:
            await run_locally(local, [user_text("x")])
        finally:
            await local.shutdown()
    assert bodies(fake, "POST", "/api/projects/p1/agents/coder/sessions") == [
        {"approvalMode": "always-ask"}
    ]


def test_specs_that_are_not_sse_urls_are_refused() -> None:
    with pytest.raises(EngineLoadError, match="sse\\+http"):
        load_engine("sse+httpx://host")
