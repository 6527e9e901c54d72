"""``--engine sse+http://HOST:PORT[/prefix]``: a reference-compatible SSE
producer as the engine, so a non-Python SSE service is served over gRPC (and
over this server's own SSE).

Each local session gets one upstream session (``POST /api/sessions``). A run
connects the upstream stream first, then posts the task (the reference's
client pattern, so nothing is missed), skips the upstream's echo of the input
(everything before its ``task_state running``), yields every message up to
``task_state idle``, and relays the controls:

* approvals: the task is posted in ``ask`` mode, and each upstream
  ``approval_request`` is answered by this server's own policy
  (``options.approve``), so ``--approval`` and gRPC ``Approve`` keep working;
* abort: ``POST /abort`` upstream; its stream then delivers the final abort.

Options (``--engine-opt``): ``token`` (the upstream's bearer token) and
``timeout`` (seconds for the upstream's non-streaming requests, default 30).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx

from omni_grpc.client.sse import (
    SSEStreamError,
    StreamItem,
    auth_headers,
    read_reference,
)
from omni_grpc.convert import message_to_dict
from omni_grpc.engines.base import Decision, JsonObject, RunOptions
from omni_grpc.engines.call_ids import CallIdRegistry, RunCallIds
from omni_grpc.vocabulary import ApprovalMode, SessionState
from omni_grpc_proto.omni.v1 import agent_service_pb2

SCHEMES = ("sse+http://", "sse+https://")


class UpstreamError(RuntimeError):
    """The upstream refused a request or broke its stream."""


def _input_parts(input: list[JsonObject]) -> list[JsonObject]:
    """This run's user messages as reference task input parts."""
    parts: list[JsonObject] = []
    for i, msg in enumerate(input):
        payload = msg.get("payload", {})
        kind = payload.get("type")
        if kind == "text":
            parts.append({"type": "text", "text": payload.get("text", "")})
        elif kind == "image_url":
            parts.append({"type": "image_url", "image_url": payload.get("image_url", "")})
        else:
            raise UpstreamError(
                f"input[{i}]: a reference SSE upstream takes text and image_url input, not {kind!r}"
            )
    return parts


_STATES = {
    agent_service_pb2.SESSION_STATE_IDLE: SessionState.IDLE,
    agent_service_pb2.SESSION_STATE_RUNNING: SessionState.RUNNING,
    agent_service_pb2.SESSION_STATE_COMPACTING: SessionState.COMPACTING,
}


def _state(item: StreamItem) -> SessionState | None:
    if item.server_event_kind != "task_state":
        return None
    assert item.server_event is not None
    return _STATES.get(item.server_event.task_state.state)


class SseUpstreamEngine:
    name = "sse-upstream"

    def __init__(self, url: str, *, token: str | None = None, timeout: float = 30.0) -> None:
        for scheme in SCHEMES:
            if url.startswith(scheme):
                url = url[len("sse+") :]
                break
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"not an sse+http(s):// URL: {url!r}")
        self.base_url = url.rstrip("/")
        self.token = token
        self._http = httpx.AsyncClient(
            base_url=self.base_url, timeout=timeout, headers=auth_headers(token)
        )
        # local session id -> upstream session id
        self._sessions: dict[str, str] = {}
        self._call_ids = CallIdRegistry()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _post(self, path: str, body: JsonObject, expect: tuple[int, ...]) -> httpx.Response:
        try:
            response = await self._http.post(path, json=body)
        except httpx.HTTPError as exc:
            raise UpstreamError(f"POST {self.base_url}{path}: {exc}") from exc
        if response.status_code not in expect:
            raise UpstreamError(
                f"POST {self.base_url}{path} answered {response.status_code}: {response.text[:300]}"
            )
        return response

    async def _upstream_session(self, session_id: str) -> str:
        upstream = self._sessions.get(session_id)
        if upstream is None:
            created = await self._post("/api/sessions", {}, (200, 201))
            upstream = _created_session_id(created)
            self._sessions[session_id] = upstream
        return upstream

    async def run(self, input: list[JsonObject], options: RunOptions) -> AsyncIterator[JsonObject]:
        parts = _input_parts(input)
        upstream = await self._upstream_session(options.session_id)
        base = f"/api/sessions/{upstream}"
        task: JsonObject = {"input": parts, "approvalMode": ApprovalMode.ASK.value}
        if options.thinking_level:
            task["thinkingLevel"] = options.thinking_level

        # The upstream's tool call ids may repeat across its tasks; the session's may not.
        ids = self._call_ids.for_run(options)
        stream = read_reference(self._http, f"{base}/stream", token=self.token)
        relay_abort: asyncio.Task[None] | None = None
        try:
            # The first event is the connect-time task_state: the stream is live.
            first = await anext(stream)
            if _state(first) != SessionState.IDLE:
                raise UpstreamError(f"upstream session {upstream} is busy")
            await self._post(f"{base}/tasks", task, (200, 202))
            relay_abort = asyncio.create_task(self._relay_abort(base, options))
            started = False
            async for item in stream:
                state = _state(item)
                if state == SessionState.RUNNING:
                    started = True
                elif state == SessionState.IDLE and started:
                    return
                elif item.server_event_kind == "resync_required":
                    raise UpstreamError("the upstream stream lost events (resync_required)")
                elif item.server_event_kind == "approval_request":
                    await self._answer(base, item, options, ids)
                elif item.message is not None and started:
                    yield message_to_dict(ids.incoming(item.message))
        except SSEStreamError as exc:
            raise UpstreamError(str(exc)) from exc
        finally:
            if relay_abort is not None:
                relay_abort.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await relay_abort
            await stream.aclose()

    async def _answer(
        self, base: str, item: StreamItem, options: RunOptions, ids: RunCallIds
    ) -> None:
        assert item.server_event is not None
        call: Any = item.server_event.approval_request.tool_call
        decision = await options.approve(message_to_dict(ids.incoming(call)))
        # The reference's approval route takes allow or deny only.
        upstream_decision = Decision.ALLOW if decision == Decision.ALLOW else Decision.DENY
        call_id = call.tool_call.tool_call_id
        await self._post(
            f"{base}/approvals/{call_id}", {"decision": upstream_decision.value}, (204, 200)
        )

    async def _relay_abort(self, base: str, options: RunOptions) -> None:
        await options.abort.wait()
        await self._post(f"{base}/abort", {"reason": options.abort.reason or ""}, (202, 204))


def _created_session_id(response: httpx.Response) -> str:
    """The id in a reference ``{"session": SessionInfo}`` answer."""
    try:
        body = response.json()
        session_id = body["session"]["sessionId"]
    except (ValueError, KeyError, TypeError):
        raise UpstreamError(
            f"POST /api/sessions answered no session.sessionId: {response.text[:300]}"
        ) from None
    if not isinstance(session_id, str) or not session_id:
        raise UpstreamError(f"POST /api/sessions answered a bad sessionId: {session_id!r}")
    return session_id


def create(url: str, token: str | None = None, timeout: str | float = 30.0) -> SseUpstreamEngine:
    return SseUpstreamEngine(url, token=token, timeout=float(timeout))
