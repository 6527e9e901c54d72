"""The HTTP face of the hub: reference routes, the Omni SSE dialect, the page.

``create_app(hub)`` returns a Starlette app that ``omni-grpc serve`` runs beside
gRPC, and that can be mounted into any ASGI application
(``Mount("/agent", app=create_app(hub))``). Every route is a thin view over the
hub: event ids, order and replay are the hub's, so an id seen here is valid for
gRPC ``Attach`` and the other way round.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
from collections.abc import AsyncGenerator, Collection, Sequence
from typing import Any, Protocol
from urllib.parse import quote

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from omni_grpc.runtime.errors import (
    BackendUnavailable,
    ErrorCode,
    HubError,
    SessionBusy,
)
from omni_grpc.runtime.interface import (
    HubEvent,
    RunRequest,
    Runtime,
    Subscription,
    is_resync,
    is_task_end,
    parse_event_id,
)
from omni_grpc.trace.window import positioned
from omni_grpc.transport.http_call import BearerAuth
from omni_grpc.transport.sse import history, openapi, page, reference_routes
from omni_grpc.transport.sse.dates import DateHeader
from omni_grpc.transport.sse.dialect import DialectEvent, DialectProjection
from omni_grpc.transport.sse.dialect_ids import FrameId, Position, parse_frame_id, run_id_for
from omni_grpc.transport.sse.errors import (
    ApiError,
    HttpRefusal,
    on_api_error,
    on_http_exception,
    on_hub_error,
    on_unexpected,
)
from omni_grpc.transport.sse.guard import LOOPBACK_NAMES, RequestGuard
from omni_grpc.transport.sse.idempotency import REPLAYED, Once, once
from omni_grpc.transport.sse.reference_routes import ReferenceRoutes
from omni_grpc.transport.sse.requests import (
    DEFAULT_MAX_BODY_BYTES,
    QUEUE_REFUSED,
    approval_mode,
    decision,
    input_messages,
    optional_string,
    queue_if_busy,
    read_json,
    thinking_level,
)
from omni_grpc.transport.sse.response import EventStreamResponse
from omni_grpc.transport.sse.sessions import session_json
from omni_grpc.transport.sse.stream import event_frames, paced
from omni_grpc.transport.sse.wire import DEFAULT_HEARTBEAT_SECONDS, PING
from omni_grpc.vocabulary import (
    AUTHORIZATION_HEADER,
    IDEMPOTENCY_KEY_HEADER,
    IDEMPOTENT_REPLAYED_HEADER,
    LAST_EVENT_ID_HEADER,
    LAST_EVENT_ID_PARAM,
    SESSION_HEADER,
    AbortKind,
)

# The abort reason recorded when a dialect client hangs up mid-run.
DISCONNECT_REASON = AbortKind.CLIENT_GONE.default_reason
# ... and when it reads too slowly to be sent the whole run.
LAGGED_REASON = "client fell behind the event buffer"
LAGGED_MESSAGE = (
    "the client read too slowly and part of the run is no longer buffered; "
    "a /v1/runs stream cannot resume (GET /api/sessions/{id}/messages has the run)"
)

log = logging.getLogger(__name__)

# Served without the token: the built-in page and its assets hold no data and
# need the token to fetch any; load balancers probe /healthz without
# credentials, as gRPC's health service.
PUBLIC_PATHS = page.ASSET_PATHS | {"/favicon.ico", "/healthz"}


class RequestTelemetry(Protocol):
    """What the app asks of the server's telemetry (``observability.Telemetry``):
    a middleware measuring and tracing every request to ``routes``."""

    def http_middleware(self, routes: Sequence[BaseRoute]) -> Middleware: ...


class SseRoutes:
    """The route handlers, bound to one hub and one set of limits."""

    def __init__(self, hub: Runtime, *, max_body_bytes: int, heartbeat: float | None) -> None:
        self.hub = hub
        self.max_body = max_body_bytes
        self.heartbeat = heartbeat

    # ---- reference routes ------------------------------------------------------

    async def list_sessions(self, _request: Request) -> Response:
        return JSONResponse({"sessions": [session_json(s) for s in await self.hub.list_sessions()]})

    async def create_session(self, request: Request) -> Response:
        body = await read_json(request, self.max_body, required=False)
        return await reference_routes.create_session(self.hub, body)

    async def get_session(self, request: Request) -> Response:
        info = await self.hub.session_info(request.path_params["sid"])
        return JSONResponse({"session": session_json(info, with_trace_path=True)})

    async def delete_session(self, request: Request) -> Response:
        """Ends the session (DeleteSession): 204; ``?deleteTrace=true`` removes
        its trace and workspace too. Its open streams end."""
        delete_trace = request.query_params.get("deleteTrace", "false")
        if delete_trace not in ("true", "false"):
            raise ApiError(ErrorCode.INVALID_REQUEST, "deleteTrace: must be true or false")
        await self.hub.delete_session(
            request.path_params["sid"], delete_trace=delete_trace == "true"
        )
        return Response(status_code=204)

    async def create_task(self, request: Request) -> Response:
        session_id = request.path_params["sid"]
        await self.hub.require_session(session_id)  # 404 before reading a large body
        body = await read_json(request, self.max_body)
        key = await once(self.hub.idempotency_keys, request, body)
        if key.replay is not None:  # sent again: the first answer, no second task
            return JSONResponse(key.replay, status_code=202, headers=REPLAYED)
        try:
            run_request = self._run_request(body, session_id)
            queue = queue_if_busy(body)
            try:
                _, subscription = await self.hub.run(run_request)
            except SessionBusy as exc:
                if queue:
                    raise ApiError(HttpRefusal.QUEUE_NOT_SUPPORTED, QUEUE_REFUSED) from exc
                raise
        except BaseException:
            await _forget(key)  # nothing started: a retry runs afresh
            raise
        subscription.close()  # the client watches /stream
        answer = {"sessionId": session_id, "queued": False}
        await _remember(key, answer)
        return JSONResponse(answer, status_code=202)

    async def stream(self, request: Request) -> Response:
        session_id = request.path_params["sid"]
        subscription = await self.hub.attach(session_id, _last_event_id(request))
        return EventStreamResponse(event_frames(subscription, heartbeat=self.heartbeat))

    async def messages(self, request: Request) -> Response:
        session_id = request.path_params["sid"]
        await self.hub.require_session(session_id)  # 404 for an unknown session
        wanted = history.page_request(request.query_params)
        # The live tail is taken before the trace is read: every message its
        # cursor covers is then in the history (the trace is written first).
        live = (
            await self.hub.live_tail(session_id)
            if wanted is None or wanted.before is None
            else None
        )
        if wanted is None:
            records = positioned(await self.hub.history_shards(session_id))
            payload = history.body(records, live, None)
        else:
            page = await self.hub.history_window(session_id, wanted.limit, wanted.before)
            payload = history.body(page.messages, live, page)
        return Response(payload, media_type="application/json")

    async def approve(self, request: Request) -> Response:
        session_id = request.path_params["sid"]
        await self.hub.require_session(session_id)  # 404 before reading the body
        body = await read_json(request, self.max_body)
        # An unknown or already decided call: 404 approval_not_found (the
        # reference's code for both), from the runtime's table.
        await self.hub.approve(session_id, request.path_params["call_id"], decision(body))
        return Response(status_code=204)

    async def abort(self, request: Request) -> Response:
        session_id = request.path_params["sid"]
        body = await read_json(request, self.max_body, required=False)
        was_running = await self.hub.abort(session_id, optional_string(body, "reason"))
        return Response(status_code=202 if was_running else 204)

    async def healthz(self, _request: Request) -> Response:
        """200 while the server can take runs; 503 naming what is wrong (a full
        or read-only data dir), like gRPC health's NOT_SERVING."""
        health = self.hub.health
        if health.serving:
            return JSONResponse({"status": "SERVING"})
        return JSONResponse({"status": "NOT_SERVING", "problems": health.problems()}, 503)

    # ---- the Omni SSE dialect ---------------------------------------------------

    async def create_run(self, request: Request) -> Response:
        last = _last_event_id(request)
        if last is not None:
            # A reconnect repeats its request with Last-Event-ID: resume the
            # run, never start it a second time.
            return await self._resume_run(request, last)
        body = await read_json(request, self.max_body)
        key = await once(self.hub.idempotency_keys, request, body)
        if key.replay is not None:  # sent again: the first run's stream, from its start
            session_id, run_start = key.replay["session_id"], key.replay["run_start"]
            return await self._replay_run(
                request, FrameId(session_id, run_start, Position(0, -1)), REPLAYED
            )
        try:
            session_id = optional_string(body, "session_id") or optional_string(body, "sessionId")
            detach = body.get("detach", False)
            if not isinstance(detach, bool):
                raise ApiError(ErrorCode.INVALID_REQUEST, "detach: must be a boolean")
            run_request = self._run_request(body, session_id)
            session_id, subscription = await self.hub.run(run_request)
        except BaseException:
            await _forget(key)
            raise
        events = paced(subscription, self.heartbeat)
        if key.keys is not None:
            # The run's first event names it for a repeat of this request.
            first = await subscription.next()
            if first is None:
                await _forget(key)
            else:
                await _remember(key, {"session_id": session_id, "run_start": first.event_id})
                events = _chain([first], events)
        projection = DialectProjection(f"run_{secrets.token_hex(8)}")  # until the first event
        frames = self._dialect_frames(request, session_id, events, projection, detach=detach)
        return EventStreamResponse(frames, headers={SESSION_HEADER: session_id})

    async def resume_run(self, request: Request) -> Response:
        """``GET /v1/runs`` with ``Last-Event-ID`` (header or ``lastEventId``
        query, for EventSource): the rest of a dialect run."""
        last = _last_event_id(request)
        if last is None:
            raise ApiError(
                ErrorCode.INVALID_REQUEST, "GET /v1/runs resumes a run: send Last-Event-ID"
            )
        return await self._resume_run(request, last)

    async def _resume_run(self, request: Request, last: str) -> Response:
        after = parse_frame_id(last)
        if after is None:
            raise ApiError(
                ErrorCode.INVALID_REQUEST, "Last-Event-ID: not the id of a /v1/runs frame"
            )
        return await self._replay_run(request, after)

    async def _replay_run(
        self, request: Request, after: FrameId, headers: dict[str, str] | None = None
    ) -> Response:
        """The run ``after`` names, from the frame after it, to its end."""
        session_id = after.session_id
        await self.hub.require_session(session_id)  # 404 for an unknown session
        subscription = await self.hub.attach(session_id, after.replay_from())
        first = await subscription.next()
        if first is None or first.event_id != after.run_start:
            subscription.close()
            raise ApiError(
                HttpRefusal.RESUME_UNAVAILABLE,
                f"the run's events are no longer buffered; its messages are at "
                f"/api/sessions/{session_id}/messages",
            )
        replayed = await _replay(first, subscription)
        run_id = run_id_for(session_id, after.run_start)
        if is_task_end(replayed[-1]):
            # The run has ended: if the client has every frame up to ``done``,
            # there is nothing left to send, and 204 is what tells an
            # EventSource to stop reconnecting (a 200 with an empty body would
            # have it reconnect forever).
            rest = self._dialect_frames(
                request,
                session_id,
                _each(replayed),
                DialectProjection(run_id),
                detach=True,
                after=after,
            )
            if not [frame async for frame in rest]:
                subscription.close()
                return Response(status_code=204, headers={SESSION_HEADER: session_id})
        events = _chain(replayed, paced(subscription, self.heartbeat))
        # The first stream's detach decided the run's fate at the drop: a run
        # still going was detached, and a resumed stream never aborts it.
        frames = self._dialect_frames(
            request, session_id, events, DialectProjection(run_id), detach=True, after=after
        )
        return EventStreamResponse(frames, headers={SESSION_HEADER: session_id, **(headers or {})})

    async def _dialect_frames(
        self,
        request: Request,
        session_id: str,
        events: AsyncGenerator[HubEvent | None, None],
        projection: DialectProjection,
        *,
        detach: bool,
        after: FrameId | None = None,
    ) -> AsyncGenerator[bytes, None]:
        root = request.scope.get("root_path", "")
        ids = _FrameIds(session_id, after)
        try:
            async for event in events:
                if event is None:
                    yield PING
                    continue
                ids.at(event)
                if ids.run_start == event.event_id:
                    projection.run_id = run_id_for(session_id, event.event_id)
                kind = event.server_event.WhichOneof("kind") if event.server_event else None
                if event.message is not None:
                    for frame in ids.frames(projection.feed(event.message, event.abort_kind)):
                        yield frame
                elif kind == "approval_request":
                    assert event.server_event is not None
                    ask = event.server_event.approval_request.tool_call
                    path = f"{root}/api/sessions/{session_id}/approvals/"
                    path += quote(ask.tool_call.tool_call_id, safe="")
                    for frame in ids.frames(projection.approval_request(ask, path)):
                        yield frame
                elif is_resync(event):
                    # The reader fell behind the buffer: events are gone, so the
                    # run cannot be told whole, and a resume (which replays the
                    # run from its start) would find it evicted too. Say so
                    # rather than finish it as completed.
                    for frame in ids.frames(projection.fail("resync_required", LAGGED_MESSAGE)):
                        yield frame
                    if not detach:
                        await self.hub.abort(session_id, LAGGED_REASON, AbortKind.CLIENT_GONE)
                    break
                elif is_task_end(event):
                    if event.failure is not None:
                        failure = event.failure
                        for frame in ids.frames(projection.fail(failure.code, failure.message)):
                            yield frame
                    break
            else:
                # The subscription closed before the task ended: the server is going away.
                failed = projection.fail("unavailable", "the server closed the run's stream")
                for frame in ids.frames(failed):
                    yield frame
            for frame in ids.frames(projection.finish()):
                yield frame
        finally:
            await events.aclose()
            if not projection.done and not detach:
                # A dumb client that hangs up wants no more of the run.
                with contextlib.suppress(HubError):
                    await self.hub.abort(session_id, DISCONNECT_REASON, AbortKind.CLIENT_GONE)

    def _run_request(self, body: dict[str, Any], session_id: str | None) -> RunRequest:
        metadata = body.get("metadata", {})
        if not isinstance(metadata, dict):
            raise ApiError(ErrorCode.INVALID_REQUEST, "metadata: must be an object")
        return RunRequest(
            input=input_messages(body),
            session_id=session_id,
            thinking_level=thinking_level(body),
            approval_mode=approval_mode(body),
            metadata=metadata,
        )


class _FrameIds:
    """Numbers a run's dialect frames (see dialect_ids) and, on a resume,
    holds back those the client already has."""

    def __init__(self, session_id: str, after: FrameId | None) -> None:
        self.session_id = session_id
        self.after = after.position if after is not None else None
        self.run_start: str | None = after.run_start if after is not None else None
        self._seq = 0
        self._index = 0

    def at(self, event: HubEvent) -> None:
        """The frames that follow come from ``event``."""
        if self.run_start is None:
            self.run_start = event.event_id
        parsed = parse_event_id(event.event_id)
        if parsed is not None and parsed[1] != self._seq:
            self._seq, self._index = parsed[1], 0

    def frames(self, events: list[DialectEvent]) -> list[bytes]:
        out = []
        for event in events:
            position = Position(self._seq, self._index)
            self._index += 1
            if self.after is not None and position <= self.after:
                continue  # sent before the reconnect
            frame_id = FrameId(self.session_id, self.run_start or "", position)
            out.append(event.encode(str(frame_id) if self.run_start else None))
        return out


def _last_event_id(request: Request) -> str | None:
    last = request.headers.get(LAST_EVENT_ID_HEADER) or request.query_params.get(
        LAST_EVENT_ID_PARAM
    )
    return last or None


async def _replay(first: HubEvent, subscription: Subscription) -> list[HubEvent]:
    """The run's events the attach replays at once: from ``first`` up to its
    task end, or up to the first live event (the attach's snapshot comes right
    after the replay), so this never waits on the run."""
    events = [first]
    while events[-1].buffered and not is_task_end(events[-1]):
        event = await subscription.next()
        if event is None:
            break
        events.append(event)
    return events


async def _each(events: list[HubEvent]) -> AsyncGenerator[HubEvent | None, None]:
    for event in events:
        yield event


async def _remember(key: Once, answer: dict[str, Any]) -> None:
    """Keeps a started task's answer for its key's repeats. A store that
    fails now costs the key (its claim lapses), never the answer."""
    try:
        await key.remember(answer)
    except BackendUnavailable as exc:
        log.warning("the answer for an Idempotency-Key was not kept: %s", exc)


async def _forget(key: Once) -> None:
    with contextlib.suppress(BackendUnavailable):
        await key.forget()


async def _chain(
    first: list[HubEvent], rest: AsyncGenerator[HubEvent | None, None]
) -> AsyncGenerator[HubEvent | None, None]:
    """``first``'s events, then ``rest``; closing this closes ``rest``."""
    try:
        for replayed in first:
            yield replayed
        async for event in rest:
            yield event
    finally:
        await rest.aclose()


def create_app(
    hub: Runtime,
    *,
    token: str | None = None,
    cors_origins: Sequence[str] = (),
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    heartbeat: float | None = DEFAULT_HEARTBEAT_SECONDS,
    serve_page: bool = True,
    telemetry: RequestTelemetry | None = None,
    extra_routes: Sequence[BaseRoute] = (),
    public_paths: Collection[str] = (),
    allowed_hosts: Sequence[str] | None = None,
    own_media: Sequence[str] = (),
) -> Starlette:
    """The SSE shim over ``hub``.

    ``token`` enables bearer auth (header or ``access_token`` parameter);
    ``cors_origins`` is the CORS allow-list (``["*"]`` allows any origin);
    ``heartbeat`` is the ``: ping`` period in seconds (None disables it);
    ``telemetry`` measures and traces every request; ``extra_routes`` are served
    beside the app's own (the server mounts ``GET /metrics`` so), behind the
    token unless their path is in ``public_paths``;
    ``allowed_hosts`` the ``Host`` names answered (default: the loopback
    names; ``["*"]`` any, for an app mounted behind its own host checks);
    ``own_media`` the path prefixes of extra routes that refuse a non-JSON
    body themselves, in their protocol's words (the A2A routes).
    """
    r = SseRoutes(hub, max_body_bytes=max_body_bytes, heartbeat=heartbeat)
    routes: list[BaseRoute] = [
        Route("/api/sessions", r.list_sessions, methods=["GET"]),
        Route("/api/sessions", r.create_session, methods=["POST"]),
        Route("/api/sessions/{sid}", r.get_session, methods=["GET"]),
        Route("/api/sessions/{sid}", r.delete_session, methods=["DELETE"]),
        Route("/api/sessions/{sid}/tasks", r.create_task, methods=["POST"]),
        Route("/api/sessions/{sid}/stream", r.stream, methods=["GET"]),
        Route("/api/sessions/{sid}/messages", r.messages, methods=["GET"]),
        Route("/api/sessions/{sid}/approvals/{call_id}", r.approve, methods=["POST"]),
        Route("/api/sessions/{sid}/abort", r.abort, methods=["POST"]),
        Route("/v1/runs", r.create_run, methods=["POST"]),
        Route("/v1/runs", r.resume_run, methods=["GET"]),
        Route("/healthz", r.healthz, methods=["GET"]),
        *ReferenceRoutes(hub, max_body_bytes=max_body_bytes).routes(),
    ]
    if serve_page:
        policy = hub.approval_policy
        routes += page.routes([m.value for m in policy.client_modes], policy.default.value)
    routes += extra_routes
    routes += openapi.routes(routes)  # the description of all of the above, and itself
    # Outermost: every JSON answer carries Date, refusals included.
    middleware: list[Middleware] = [Middleware(DateHeader)]
    if telemetry is not None:
        middleware.append(telemetry.http_middleware(routes))
    # Telemetry sees refused requests too; the guard comes before CORS and auth.
    middleware.append(
        Middleware(
            RequestGuard,
            allowed_hosts=LOOPBACK_NAMES if allowed_hosts is None else allowed_hosts,
            allowed_origins=cors_origins,
            own_media=own_media,
        )
    )
    if cors_origins:
        middleware.append(
            Middleware(
                CORSMiddleware,
                allow_origins=list(cors_origins),
                allow_methods=["GET", "POST", "PATCH", "DELETE"],
                allow_headers=[
                    AUTHORIZATION_HEADER,
                    "Content-Type",
                    LAST_EVENT_ID_HEADER,
                    IDEMPOTENCY_KEY_HEADER,
                ],
                expose_headers=[SESSION_HEADER, IDEMPOTENT_REPLAYED_HEADER],
            )
        )
    if token:
        public = PUBLIC_PATHS | openapi.PUBLIC_PATHS | frozenset(public_paths)
        middleware.append(Middleware(BearerAuth, token=token, public_paths=public))
    return Starlette(
        routes=routes,
        middleware=middleware,
        exception_handlers={
            ApiError: on_api_error,
            HubError: on_hub_error,
            HTTPException: on_http_exception,
            Exception: on_unexpected,
        },
    )
