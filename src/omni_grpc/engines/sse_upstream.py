"""``--engine sse+http://HOST:PORT[/prefix]``: a reference-compatible SSE
producer as the engine, so a non-Python SSE service is served over gRPC (and
over this server's own SSE).

It speaks the reference server's routes and bodies (its
``http/routes/sessions.ts``), which omni-grpc's own SSE shim serves too:

* each local session gets one upstream session, created with
  ``POST /api/projects/{project}/agents/{agent}/sessions`` and
  ``{"approvalMode": "always-ask"}``: the approval mode is the session's
  there (a task body carries none), so every upstream tool call comes back as
  an ``approval_request``, answered by this server's own policy
  (``options.approve``) and ``POST /approvals/{id}``; ``--approval-mode`` and
  gRPC ``Approve`` keep working, and nothing runs unasked upstream;
* a run connects the upstream stream first, then posts the task
  ``{input: [{type:"text",text} | {type:"image_url",imageUrl}], thinkingLevel?}``
  (the reference's client pattern, so nothing is missed), skips the upstream's
  echo of the input (everything before its ``task_state running``) and yields
  every message up to ``task_state idle``;
* abort: ``POST /abort`` upstream (the reference ignores the body; omni-grpc
  reads its ``reason``); its stream then delivers the final abort.

Options (``--engine-opt``): ``token`` (the upstream's bearer token),
``timeout`` (seconds for the upstream's non-streaming requests, default 30),
``project`` and ``agent`` (the upstream project and agent the sessions are
created in, default ``default``, which is what omni-grpc serves).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import quote

import httpx

from omni_grpc.client.sse import (
    SSEStreamError,
    StreamItem,
    auth_headers,
    read_reference,
)
from omni_grpc.convert import message_to_dict
from omni_grpc.engines.base import (
    ApprovalUnanswered,
    Decision,
    EngineMessage,
    JsonObject,
    RunOptions,
)
from omni_grpc.engines.call_ids import CallIdRegistry, RunCallIds
from omni_grpc.engines.pairing import Pairings
from omni_grpc.vocabulary import REFERENCE_ASK, SessionState, StopReason
from omni_grpc_proto.omni.v1 import agent_service_pb2

SCHEMES = ("sse+http://", "sse+https://")
# The upstream project and agent sessions are created in (omni-grpc serves
# one of each, by these names).
DEFAULT_PROJECT = "default"
DEFAULT_AGENT = "default"


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
            # The reference's TaskInputPart key (the payload's own is image_url).
            parts.append({"type": "image_url", "imageUrl": payload.get("image_url", "")})
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
    # The run lives in the upstream server, which this one cannot start again
    # on a past: a run whose process was lost is closed with abort.
    resumable = False
    name = "sse-upstream"

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        timeout: float = 30.0,
        project: str = DEFAULT_PROJECT,
        agent: str = DEFAULT_AGENT,
    ) -> None:
        for scheme in SCHEMES:
            if url.startswith(scheme):
                url = url[len("sse+") :]
                break
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"not an sse+http(s):// URL: {url!r}")
        self.base_url = url.rstrip("/")
        self.token = token
        self.sessions_path = (
            f"/api/projects/{quote(project, safe='')}/agents/{quote(agent, safe='')}/sessions"
        )
        self._http = httpx.AsyncClient(
            base_url=self.base_url, timeout=timeout, headers=auth_headers(token)
        )
        # local session -> upstream session, beside the trace (any replica finds it)
        self._pairings = Pairings("sse-upstream", self.base_url)
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

    async def _upstream_session(self, options: RunOptions) -> str:
        upstream = self._pairings.get(options)
        if upstream is None:
            # Ask mode is the upstream session's: every call is ours to decide.
            body = {"approvalMode": REFERENCE_ASK}
            created = await self._post(self.sessions_path, body, (200, 201))
            upstream = _created_session_id(created, self.sessions_path)
            self._pairings.set(options, upstream)
        return upstream

    async def run(
        self, input: list[JsonObject], options: RunOptions
    ) -> AsyncIterator[EngineMessage]:
        parts = _input_parts(input)
        upstream = await self._upstream_session(options)
        base = f"/api/sessions/{upstream}"
        task: JsonObject = {"input": parts}
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
                    yield ids.incoming(item.message)  # a message: not re-encoded as a dict
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
        try:
            decision = await options.approve(message_to_dict(ids.incoming(call)))
        except ApprovalUnanswered as why:
            if why.stop_reason == StopReason.ABORTED:
                return  # the abort is relayed; the upstream settles its own approvals
            decision = Decision.DENY  # the wait expired: the upstream knows only decisions
        # The reference's approval route takes allow or deny only.
        upstream_decision = Decision.ALLOW if decision == Decision.ALLOW else Decision.DENY
        call_id = call.tool_call.tool_call_id
        # After an abort the upstream may have denied the call itself (the
        # reference resolves pending approvals on abort): 404 then says so.
        expect = (204, 200, 404) if options.abort.is_set() else (204, 200)
        await self._post(
            f"{base}/approvals/{call_id}", {"decision": upstream_decision.value}, expect
        )

    async def _relay_abort(self, base: str, options: RunOptions) -> None:
        await options.abort.wait()
        await self._post(f"{base}/abort", {"reason": options.abort.reason or ""}, (202, 204))


def _created_session_id(response: httpx.Response, path: str) -> str:
    """The id in a reference ``{"session": SessionInfo}`` answer."""
    try:
        body = response.json()
        session_id = body["session"]["sessionId"]
    except (ValueError, KeyError, TypeError):
        raise UpstreamError(
            f"POST {path} answered no session.sessionId: {response.text[:300]}"
        ) from None
    if not isinstance(session_id, str) or not session_id:
        raise UpstreamError(f"POST {path} answered a bad sessionId: {session_id!r}")
    return session_id


def create(
    url: str,
    token: str | None = None,
    timeout: str | float = 30.0,
    project: str = DEFAULT_PROJECT,
    agent: str = DEFAULT_AGENT,
) -> SseUpstreamEngine:
    return SseUpstreamEngine(url, token=token, timeout=float(timeout), project=project, agent=agent)
