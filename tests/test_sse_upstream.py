"""``--engine sse+http://``: a reference SSE server as the engine of another hub."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from omni_grpc.convert import message_from_dict
from omni_grpc.engines.demo import DemoEngine
from omni_grpc.engines.loader import EngineLoadError, load_engine
from omni_grpc.engines.sse_upstream import SseUpstreamEngine
from omni_grpc.protocol import user_text
from omni_grpc.runtime.approvals import ApprovalMode
from omni_grpc.runtime.hub import Hub, RunRequest
from omni_grpc.transport.sse.app import create_app
from omni_grpc.transport.sse.server import HttpServer


@asynccontextmanager
async def upstream(tmp_path: Path, pacing: float = 0.0) -> AsyncIterator[tuple[Hub, str]]:
    hub = Hub(
        DemoEngine(pacing=pacing), tmp_path / "upstream", default_approval=ApprovalMode.ALLOW_ALL
    )
    server = HttpServer(create_app(hub, token="up"), port=0)
    await server.start()
    try:
        yield hub, server.url
    finally:
        await hub.shutdown()
        await server.stop()


def payloads(datas: list[bytes]) -> list[dict[str, object]]:
    out = []
    for data in datas:
        obj = json.loads(data)
        if "payload" in obj:
            out.append(obj["payload"])
    return out


async def test_ask_mode_is_answered_by_the_local_hub(tmp_path: Path) -> None:
    async with upstream(tmp_path) as (_, url):
        engine = load_engine(f"sse+{url}", {"token": "up"})
        assert isinstance(engine, SseUpstreamEngine)
        local = Hub(engine, tmp_path / "local")
        try:
            sid, sub = await local.run(
                RunRequest(
                    input=[message_from_dict(user_text("hi"))], approval_mode=ApprovalMode.ASK
                )
            )
            seen: list[bytes] = []
            async for event in sub:
                seen.append(event.data)
                ev = event.server_event
                if ev is not None and ev.WhichOneof("kind") == "approval_request":
                    call_id = ev.approval_request.tool_call.tool_call.tool_call_id
                    await local.approve(sid, call_id, "deny")
                if (
                    ev is not None
                    and ev.WhichOneof("kind") == "task_state"
                    and ev.task_state.state == 1
                ):
                    break
        finally:
            await local.shutdown()
    kinds = [p["type"] for p in payloads(seen)]
    decision = next(p for p in payloads(seen) if p["type"] == "approval_decision")
    assert decision["decision"] == "deny"
    denied = next(p for p in payloads(seen) if p["type"] == "tool_call_output")
    assert denied["stop_reason"] == "aborted" and denied["output"] == "Tool call denied by user."
    assert kinds[0] == "text" and kinds[-1] == "request_end"
    # The upstream's input echo is not repeated: the prompt appears once.
    assert sum(1 for p in payloads(seen) if p.get("role") == "user" and p["type"] == "text") == 1


async def test_abort_is_relayed_upstream(tmp_path: Path) -> None:
    async with upstream(tmp_path, pacing=0.05) as (up_hub, url):
        local = Hub(SseUpstreamEngine(f"sse+{url}", token="up"), tmp_path / "local")
        try:
            sid, sub = await local.run(RunRequest(input=[message_from_dict(user_text("slow"))]))
            seen: list[bytes] = []
            async for event in sub:
                seen.append(event.data)
                if len(seen) == 8:
                    assert await local.abort(sid, "stop it")
                ev = event.server_event
                if (
                    ev is not None
                    and ev.WhichOneof("kind") == "task_state"
                    and ev.task_state.state == 1
                ):
                    break
            (up_session,) = await up_hub.list_sessions()
            await asyncio.wait_for(up_hub.wait_idle(up_session.session_id), 5)
            assert (await up_hub.session_info(up_session.session_id)).state == "idle"
        finally:
            await local.shutdown()
    last = payloads(seen)[-1]
    assert last == {"type": "abort", "reason": "stop it"}


async def test_an_unreachable_upstream_fails_the_run_as_messages(tmp_path: Path) -> None:
    async with upstream(tmp_path) as (_, url):
        dead = url  # the port is closed once the server stops
    local = Hub(SseUpstreamEngine(f"sse+{dead}"), tmp_path / "local")
    try:
        _, sub = await local.run(RunRequest(input=[message_from_dict(user_text("x"))]))
        seen = []
        async for event in sub:
            seen.append(event.data)
            ev = event.server_event
            if (
                ev is not None
                and ev.WhichOneof("kind") == "task_state"
                and ev.task_state.state == 1
            ):
                break
    finally:
        await local.shutdown()
    last = payloads(seen)[-1]
    assert last["type"] == "abort"
    assert str(last["reason"]).startswith("engine error: POST http://127.0.0.1:")
    assert "/api/sessions" in str(last["reason"])


def test_specs_that_are_not_sse_urls_are_refused() -> None:
    with pytest.raises(EngineLoadError, match="sse\\+http"):
        load_engine("sse+httpx://host")
