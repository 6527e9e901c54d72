"""Who ended a run travels with its abort event, never guessed from the reason:
the hub records the kind, the SSE dialect reports a failure from it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
from test_runtime_hub import prompt, until_end

from omni_grpc import protocol
from omni_grpc.client.sse import read_dialect
from omni_grpc.engines.base import EngineMessage, JsonObject, RunOptions
from omni_grpc.engines.demo import DemoEngine
from omni_grpc.runtime import ApprovalMode
from omni_grpc.runtime.events import HubEvent
from omni_grpc.runtime.hub import Hub
from omni_grpc.transport.sse.app import create_app
from omni_grpc.transport.sse.server import HttpServer
from omni_grpc.vocabulary import USER_ABORT_REASON, AbortKind


def aborts(events: list[HubEvent]) -> list[tuple[AbortKind | None, str]]:
    return [
        (e.abort_kind, e.message.abort.reason)
        for e in events
        if e.message is not None and e.message.WhichOneof("payload") == "abort"
    ]


async def ask_then(hub: Hub, act: str, kind: AbortKind | None) -> list[HubEvent]:
    session_id, sub = await hub.run(prompt(approval_mode=ApprovalMode.ASK))
    events: list[HubEvent] = []
    async for event in sub:
        events.append(event)
        if event.server_event is not None and event.server_event.HasField("approval_request"):
            break
    if act == "shutdown":
        closing = asyncio.create_task(hub.shutdown())
        events += await until_end(sub)
        await closing
    else:
        assert await (hub.abort(session_id, None, kind) if kind else hub.abort(session_id))
        events += await until_end(sub)
    return events


@pytest.mark.parametrize("kind", [None, AbortKind.USER, AbortKind.CLIENT_GONE])
async def test_an_abort_someone_asked_for_keeps_its_kind(
    tmp_path: Path, kind: AbortKind | None
) -> None:
    events = await ask_then(Hub(DemoEngine(), tmp_path), "abort", kind)
    want = kind or AbortKind.USER
    assert aborts(events) == [(want, want.default_reason)]
    assert not want.is_failure


async def test_shutdown_aborts_are_shutdown(tmp_path: Path) -> None:
    events = await ask_then(Hub(DemoEngine(), tmp_path), "shutdown", None)
    assert aborts(events) == [(AbortKind.SHUTDOWN, "server shutting down")]


class GivesUp:
    """Ends with abort though nobody asked (the reference's llm request error)."""

    name = "gives-up"

    async def run(
        self, input: list[JsonObject], options: RunOptions
    ) -> AsyncIterator[EngineMessage]:
        yield protocol.request_begin()
        yield protocol.request_end("auth", error_message="401")
        yield protocol.abort_event("llm request error: 401")


class Crashes:
    name = "crashes"

    async def run(
        self, input: list[JsonObject], options: RunOptions
    ) -> AsyncIterator[EngineMessage]:
        yield protocol.partial_text("start", "par")
        raise RuntimeError("boom")


class AbortsAsAskedWithAFailingReason:
    """A user stop whose reason reads like a failure is still a user stop."""

    name = "polite"

    async def run(
        self, input: list[JsonObject], options: RunOptions
    ) -> AsyncIterator[EngineMessage]:
        yield protocol.request_begin()
        await options.abort.wait()
        yield protocol.request_end("aborted")
        yield protocol.abort_event("engine error: looks bad")


async def test_an_engine_that_aborts_unasked_failed(tmp_path: Path) -> None:
    _, sub = await Hub(GivesUp(), tmp_path).run(prompt())
    assert aborts(await until_end(sub)) == [(AbortKind.ENGINE_FAILURE, "llm request error: 401")]


async def test_the_hubs_closing_abort_for_a_crash_is_a_failure(tmp_path: Path) -> None:
    _, sub = await Hub(Crashes(), tmp_path).run(prompt())
    ((kind, reason),) = aborts(await until_end(sub))
    assert kind is AbortKind.ENGINE_FAILURE and kind.is_failure
    assert reason == "engine error: boom"


async def test_the_kind_not_the_reason_decides(tmp_path: Path) -> None:
    hub = Hub(AbortsAsAskedWithAFailingReason(), tmp_path)
    session_id, sub = await hub.run(prompt())
    events: list[HubEvent] = []
    async for event in sub:
        events.append(event)
        if event.message is not None and event.message.WhichOneof("payload") == "request_begin":
            break
    assert await hub.abort(session_id)
    events += await until_end(sub)
    assert aborts(events) == [(AbortKind.USER, "engine error: looks bad")]


def test_every_kind_has_its_own_words() -> None:
    reasons = [k.default_reason for k in AbortKind]
    assert len(set(reasons)) == len(reasons) and all(reasons)
    assert USER_ABORT_REASON == "aborted by user"  # the reference's wording
    assert {k for k in AbortKind if k.is_failure} == {
        AbortKind.ENGINE_FAILURE,
        AbortKind.SERVER_FAILURE,
        AbortKind.REPLICA_LOST,
    }


class TalksThenWaits:
    """Says something, waits for the abort, and stops with a reason that reads
    like a failure."""

    name = "talks"

    async def run(
        self, input: list[JsonObject], options: RunOptions
    ) -> AsyncIterator[EngineMessage]:
        yield protocol.assistant_text("working")
        await options.abort.wait()
        yield protocol.abort_event("engine error: looks bad")


@asynccontextmanager
async def http_for(hub: Hub) -> AsyncIterator[httpx.AsyncClient]:
    server = HttpServer(create_app(hub), port=0)
    await server.start()
    try:
        async with httpx.AsyncClient(base_url=server.url, timeout=10) as http:
            yield http
    finally:
        await hub.shutdown()
        await server.stop()


async def test_over_the_dialect_a_crash_is_an_error(tmp_path: Path) -> None:
    async with http_for(Hub(Crashes(), tmp_path)) as http:
        events = [(e.event, e.data) async for e in read_dialect(http, "/v1/runs", {"prompt": "x"})]
    assert events[-2:] == [
        ("error", {"code": "engine_error", "message": "engine error: boom"}),
        ("done", {"run_id": events[-1][1]["run_id"], "total_tokens": 0, "status": "failed"}),
    ]


async def test_over_the_dialect_a_user_stop_is_no_error_whatever_its_reason(
    tmp_path: Path,
) -> None:
    hub = Hub(TalksThenWaits(), tmp_path)
    async with http_for(hub) as http:
        stream = read_dialect(http, "/v1/runs", {"prompt": "x"})
        first = await anext(stream)
        assert (first.event, first.data) == ("message", {"delta": "working"})
        (session,) = await hub.list_sessions()
        stop = await http.post(f"/api/sessions/{session.session_id}/abort", json={})
        assert stop.status_code == 202
        rest = [(e.event, e.data["status"]) async for e in stream]
    assert rest == [("done", "aborted")]
