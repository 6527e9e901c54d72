"""A stand-in for the reference server (penguin-harness 0.2.4), for testing the
``sse+http://`` upstream engine against the reference's routes, not our shim's.

It follows the reference's own code (``packages/server/src/http/routes/
sessions.ts``, ``runtime/session-manager.ts``, ``runtime/approvals.ts``,
``runtime/channel.ts``, ``http/sse.ts``), not omni-grpc's:

* sessions are created only at ``POST /api/projects/:p/agents/:a/sessions``
  (there is no ``POST /api/sessions``) and carry their own ``approvalMode``
  (default ``allow-all``), changed by ``PATCH /api/sessions/:id``; a task body
  has no approval mode (an unknown key is ignored, as there);
* ``POST /tasks`` validates input parts strictly: ``text`` non-empty,
  ``image_url`` by its ``imageUrl`` key (an http(s) or base64 data URL);
* at task start the channel publishes the input messages, then ``task_state
  running``; every decision re-reads the session's mode; an ``always-ask``
  call publishes ``approval_request {toolCall}`` and waits with no timeout for
  ``POST /approvals/:id {decision: allow|deny}`` (204; 404 when not pending);
* ``POST /abort`` (202 running, 204 idle; the body is ignored) resolves every
  pending approval as deny, then fires the signal; the engine then yields
  ``abort`` with its request still open, as the reference's core does when it
  is interrupted inside a turn;
* the stream writes hono's ``writeSSE`` frames: ``event: server_event`` only
  for server events, ``data``, ``id: <epoch>-<seq>``; a connection gets its own
  ``task_state`` (and pending ``approval_request``s) first, which take a seq
  but are never replayed.

The engine behind it is scripted: one request with a ``list_workspace`` tool
call, the approval, the output, an answer, ``token_usage``, ``request_end``.
Every request the fake received is kept in ``requests`` for the test to read.
"""

from __future__ import annotations

import asyncio
import itertools
import re
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from omni_grpc import protocol

APPROVAL_MODES = ("allow-all", "deny-all", "read-only", "always-ask")
THINKING_LEVELS = ("none", "low", "medium", "high", "xhigh", "max")
VALID_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
IMAGE_DATA_URL = re.compile(r"^data:[^;,]+;base64,[A-Za-z0-9+/=\s]+$")
TOOL = "list_workspace"
# The engine's reason for an interrupted run.
ABORT_REASON = "aborted by user"


class HttpError(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def bad_request(message: str) -> HttpError:
    return HttpError(400, "invalid_request", message)


def _compact(value: Any) -> str:
    return orjson.dumps(value).decode()


class Channel:
    """runtime/channel.ts: ``<epoch>-<seq>`` ids, a replay buffer, and
    ``send_to`` events that take a seq but are not buffered."""

    def __init__(self) -> None:
        self.epoch = secrets.token_hex(4)
        self.seq = itertools.count(1)
        self.buffer: list[tuple[int, bytes]] = []
        self.subscribers: set[asyncio.Queue[bytes]] = set()

    def _frame(self, data: Any, event: str | None) -> tuple[int, bytes]:
        seq = next(self.seq)
        head = f"event: {event}\n" if event else ""
        text = f"{head}data: {_compact(data)}\nid: {self.epoch}-{seq}\n\n"
        return seq, text.encode()

    def publish(self, data: Any, event: str | None = None) -> None:
        seq, frame = self._frame(data, event)
        self.buffer.append((seq, frame))
        for queue in self.subscribers:
            queue.put_nowait(frame)

    def replay_after(self, last_id: str) -> list[bytes] | None:
        epoch, _, seq = last_id.rpartition("-")
        if epoch != self.epoch or not seq.isdigit():
            return None
        return [frame for s, frame in self.buffer if s > int(seq)]


@dataclass
class FakeSession:
    info: dict[str, Any]
    channel: Channel = field(default_factory=Channel)
    running: asyncio.Task[None] | None = None
    abort: asyncio.Event = field(default_factory=asyncio.Event)
    pending: dict[str, tuple[dict[str, Any], asyncio.Future[str]]] = field(default_factory=dict)
    calls: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def state(self) -> dict[str, Any]:
        return {"type": "task_state", "state": self.info["status"], "queued": 0}


class ReferenceServer:
    def __init__(self, projects: dict[str, set[str]] | None = None) -> None:
        self.projects = projects if projects is not None else {"default": {"default"}}
        self.sessions: dict[str, FakeSession] = {}
        # (method, path, parsed JSON body or None) of every request, in order.
        self.requests: list[tuple[str, str, Any]] = []
        # Set to hold each run just before it answers (the test releases it).
        self.hold_answer: asyncio.Event | None = None
        self.app = Starlette(
            routes=[
                Route("/api/projects/{p}/agents/{a}/sessions", self.create, methods=["POST"]),
                Route("/api/projects/{p}/agents/{a}/sessions", self.list, methods=["GET"]),
                Route("/api/sessions/{sid}", self.get, methods=["GET"]),
                Route("/api/sessions/{sid}", self.patch, methods=["PATCH"]),
                Route("/api/sessions/{sid}/stream", self.stream, methods=["GET"]),
                Route("/api/sessions/{sid}/tasks", self.task, methods=["POST"]),
                Route("/api/sessions/{sid}/approvals/{cid}", self.approve, methods=["POST"]),
                Route("/api/sessions/{sid}/abort", self.abort_route, methods=["POST"]),
            ],
            exception_handlers={HttpError: self._error, 404: self._not_found},
        )

    # ---- plumbing ----------------------------------------------------------------

    async def _error(self, _request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HttpError)
        return JSONResponse({"error": {"code": exc.code, "message": exc.message}}, exc.status)

    async def _not_found(self, request: Request, _exc: Exception) -> Response:
        await self._record(request)
        return JSONResponse({"error": {"code": "not_found", "message": "Not Found"}}, 404)

    async def _record(self, request: Request) -> Any:
        raw = await request.body()
        body = orjson.loads(raw) if raw.strip() else None
        self.requests.append((request.method, request.url.path, body))
        return body

    async def _json(self, request: Request) -> dict[str, Any]:
        body = await self._record(request)
        if not isinstance(body, dict):
            raise bad_request("Request body must be a JSON object.")
        return body

    def _session(self, request: Request) -> FakeSession:
        session = self.sessions.get(request.path_params["sid"])
        if session is None:
            raise HttpError(
                404, "session_not_found", "Session does not exist or you do not have access."
            )
        return session

    @staticmethod
    def _mode(body: dict[str, Any]) -> str | None:
        mode = body.get("approvalMode")
        if mode is not None and mode not in APPROVAL_MODES:
            raise bad_request(f"approvalMode must be one of {' / '.join(APPROVAL_MODES)}.")
        return mode

    # ---- routes --------------------------------------------------------------------

    async def create(self, request: Request) -> Response:
        project, agent = request.path_params["p"], request.path_params["a"]
        body = await self._json(request)
        if not VALID_ID.match(project) or not VALID_ID.match(agent):
            raise bad_request("Invalid id.")
        if agent not in self.projects.get(project, set()):
            raise HttpError(404, "agent_not_found", "Agent does not exist.")
        if ("modelId" in body) != ("provider" in body):
            raise bad_request("modelId and provider must be given together.")
        now = protocol.now_timestamp()
        session_id = f"session-fake-{secrets.token_hex(4)}"
        info = {
            "sessionId": session_id,
            "projectId": project,
            "agentId": agent,
            "provider": body.get("provider", "fake"),
            "modelId": body.get("modelId", "fake-model"),
            "workspace": f"/tmp/{session_id}",
            "approvalMode": self._mode(body) or "allow-all",
            "createdAt": now,
            "lastActiveAt": now,
            "status": "idle",
            "pendingApprovalCount": 0,
            "pendingFollowUpCount": 0,
            "hasTrace": False,
            "archived": False,
        }
        self.sessions[session_id] = FakeSession(info)
        return JSONResponse({"session": info}, 201)

    async def list(self, request: Request) -> Response:
        await self._record(request)
        return JSONResponse({"sessions": [s.info for s in self.sessions.values()]})

    async def get(self, request: Request) -> Response:
        await self._record(request)
        return JSONResponse({"session": self._session(request).info})

    async def patch(self, request: Request) -> Response:
        session = self._session(request)
        body = await self._json(request)
        mode = self._mode(body)
        if mode is None:
            raise HttpError(400, "no_update", "No updatable field provided.")
        session.info["approvalMode"] = mode  # re-read by the next decision
        return JSONResponse({"session": session.info})

    async def stream(self, request: Request) -> Response:
        await self._record(request)
        session = self._session(request)
        channel = session.channel
        queue: asyncio.Queue[bytes] = asyncio.Queue()
        channel.subscribers.add(queue)  # subscribe first, then replay
        first: list[bytes] = []
        last = request.headers.get("last-event-id")
        if last:
            replay = channel.replay_after(last)
            if replay is None:
                first.append(channel._frame({"type": "resync_required"}, "server_event")[1])
            else:
                first.extend(replay)
        first.append(channel._frame(session.state(), "server_event")[1])
        for call, _ in session.pending.values():
            ask = {"type": "approval_request", "toolCall": call}
            first.append(channel._frame(ask, "server_event")[1])

        async def frames() -> AsyncIterator[bytes]:
            try:
                for frame in first:
                    yield frame
                while True:
                    yield await queue.get()
            finally:
                channel.subscribers.discard(queue)

        headers = {"cache-control": "no-cache", "x-accel-buffering": "no"}
        return StreamingResponse(frames(), media_type="text/event-stream", headers=headers)

    async def task(self, request: Request) -> Response:
        session = self._session(request)
        body = await self._json(request)
        thinking = body.get("thinkingLevel")
        if thinking is not None and thinking not in THINKING_LEVELS:
            raise bad_request(f"thinkingLevel must be one of {' / '.join(THINKING_LEVELS)}.")
        messages = _task_input(body)
        if session.running is not None:
            raise HttpError(409, "task_in_progress", "A Task is already in progress.")
        session.abort = asyncio.Event()
        session.info["status"] = "running"
        for msg in messages:
            session.channel.publish(msg)
        session.channel.publish(session.state(), "server_event")
        session.running = asyncio.create_task(self._drive(session, messages))
        return JSONResponse({"sessionId": session.info["sessionId"], "queued": False}, 202)

    async def approve(self, request: Request) -> Response:
        session = self._session(request)
        body = await self._json(request)
        decision = body.get("decision")
        if decision not in ("allow", "deny"):
            raise bad_request("decision must be one of allow / deny.")
        entry = session.pending.pop(request.path_params["cid"], None)
        if entry is None:
            raise HttpError(
                404, "approval_not_found", "Approval does not exist or has already been decided."
            )
        entry[1].set_result(decision)
        return Response(status_code=204)

    async def abort_route(self, request: Request) -> Response:
        session = self._session(request)
        await self._record(request)
        if session.running is None:
            return Response(status_code=204)
        for _, future in session.pending.values():
            future.set_result("deny")
        session.pending.clear()
        session.abort.set()
        return Response(status_code=202)

    # ---- the scripted engine -------------------------------------------------------

    async def _drive(self, session: FakeSession, input: list[dict[str, Any]]) -> None:
        try:
            async for msg in self._run(session):
                session.channel.publish(msg)
        finally:
            session.running = None
            session.info["status"] = "idle"
            session.info["hasTrace"] = True
            session.channel.publish(session.state(), "server_event")

    async def _run(self, session: FakeSession) -> AsyncIterator[dict[str, Any]]:
        call_id = f"call_{next(session.calls)}"
        yield protocol.request_begin()
        call = protocol.tool_call(TOOL, '{"path":"."}', call_id)
        yield call
        decision = await self._decide(session, call)
        yield protocol.approval_decision(decision, call_id)
        if session.abort.is_set():
            # Interrupted inside the turn: the request is left open.
            yield protocol.abort_event(ABORT_REASON)
            return
        if decision == "allow":
            yield protocol.tool_call_output("(the workspace is empty)", call_id)
        else:
            yield protocol.denied_tool_output(call, decision)
        if self.hold_answer is not None:
            await _first(self.hold_answer.wait(), session.abort.wait())
            if session.abort.is_set():
                yield protocol.abort_event(ABORT_REASON)
                return
        yield protocol.assistant_text("The workspace is empty.")
        counts = {"cache_read": 0, "cache_write": 5, "output": 5, "total": 10}
        yield protocol.token_usage(counts, counts)
        yield protocol.request_end("completed")

    async def _decide(self, session: FakeSession, call: dict[str, Any]) -> str:
        mode = session.info["approvalMode"]  # re-read per decision
        if mode == "allow-all":
            return "allow"
        if mode == "deny-all":
            return "deny"
        # read-only: list_workspace is read-only ("r") there, so it is allowed.
        if mode == "read-only":
            return "allow"
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        call_id = call["payload"]["tool_call_id"]
        session.pending[call_id] = (call, future)
        session.channel.publish({"type": "approval_request", "toolCall": call}, "server_event")
        return await future


async def _first(*waits: Any) -> None:
    tasks = [asyncio.ensure_future(w) for w in waits]
    _, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    for task in pending:
        task.cancel()


def _task_input(body: dict[str, Any]) -> list[dict[str, Any]]:
    """sessions.ts parseTaskInput (text and image parts; files are not faked)."""
    parts = body.get("input")
    if not isinstance(parts, list) or not parts:
        raise bad_request("input must be an array with at least one item.")
    messages = []
    for i, part in enumerate(parts):
        if not isinstance(part, dict):
            raise bad_request(f"input[{i}] must be an object.")
        if part.get("type") == "text":
            text = part.get("text")
            if not isinstance(text, str) or not text:
                raise bad_request(f"input[{i}].text must be a non-empty string.")
            messages.append(protocol.user_text(text))
        elif part.get("type") == "image_url":
            url = part.get("imageUrl")
            if not isinstance(url, str) or not (
                url.startswith(("http://", "https://")) or IMAGE_DATA_URL.match(url)
            ):
                raise bad_request(
                    f"input[{i}].imageUrl must be an http(s) URL or a base64 data: URL "
                    "(data:<mime>;base64,<bytes>)."
                )
            messages.append(protocol.image_url(url))
        else:
            raise bad_request(f"input[{i}].type must be one of text / image_url / file.")
    return messages
