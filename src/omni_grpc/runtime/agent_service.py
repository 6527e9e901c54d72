"""AgentService's calls over the runtime, whatever wire carries them.

gRPC, Connect and gRPC-Web all serve the one schema (``omni.v1.AgentService``):
the same requests decoded into runtime calls (naming the field at fault), the
same responses, the same life of a streaming call (a Run whose client leaves
is aborted unless it asked to detach; an Attach that ends without its client
leaving says why). A transport frames what :class:`AgentCalls` gives and
answers the ``HubError`` it raises from ``runtime.errors.STATUSES``.

Run and Attach responses are written straight from each event's wire bytes,
once per event for all its subscribers (:func:`response_bytes`): a
``RunResponse`` and an ``AttachResponse`` have the same fields (event_id 1,
message 2 | event 3, session_id 4, json 5).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterable
from dataclasses import replace

from google.protobuf import json_format

from omni_grpc import protocol
from omni_grpc.convert import message_from_dict, serialize_message
from omni_grpc.protocol.run_input import InputProblem, check_run_input, tool_calls_made
from omni_grpc.runtime.errors import (
    ErrorCode,
    EventsMissed,
    HubError,
    InvalidRequest,
    SessionDeleted,
    SessionNotFound,
)
from omni_grpc.runtime.health import RunFailure
from omni_grpc.runtime.interface import (
    DEADLINE_REASON,
    CallContext,
    HubEvent,
    RunRequest,
    Runtime,
    SessionInfo,
    Subscription,
    is_resync,
    is_task_end,
)
from omni_grpc.trace.window import Position, format_cursor, parse_cursor
from omni_grpc.vocabulary import AbortKind, ApprovalMode, Decision, SessionState, ThinkingLevel
from omni_grpc_proto.omni.v1 import agent_service_pb2 as pb
from omni_grpc_proto.omni.v1 import omni_pb2

# The abort reason recorded when a Run's caller goes away without detaching.
CANCEL_REASON = "the Run call was cancelled"

THINKING_LEVELS: dict[int, ThinkingLevel | None] = {
    pb.THINKING_LEVEL_UNSPECIFIED: None,
    pb.THINKING_LEVEL_NONE: ThinkingLevel.NONE,
    pb.THINKING_LEVEL_LOW: ThinkingLevel.LOW,
    pb.THINKING_LEVEL_MEDIUM: ThinkingLevel.MEDIUM,
    pb.THINKING_LEVEL_HIGH: ThinkingLevel.HIGH,
    pb.THINKING_LEVEL_XHIGH: ThinkingLevel.XHIGH,
    pb.THINKING_LEVEL_MAX: ThinkingLevel.MAX,
}
APPROVAL_MODES: dict[int, ApprovalMode | None] = {
    pb.APPROVAL_MODE_UNSPECIFIED: None,
    pb.APPROVAL_MODE_ALLOW_ALL: ApprovalMode.ALLOW_ALL,
    pb.APPROVAL_MODE_DENY_ALL: ApprovalMode.DENY_ALL,
    pb.APPROVAL_MODE_READ_ONLY: ApprovalMode.READ_ONLY,
    pb.APPROVAL_MODE_ASK: ApprovalMode.ASK,
}
DECISIONS: dict[int, Decision] = {
    omni_pb2.DECISION_ALLOW: Decision.ALLOW,
    omni_pb2.DECISION_DENY: Decision.DENY,
    omni_pb2.DECISION_FORBIDDEN: Decision.FORBIDDEN,
}
_STATES = {
    SessionState.IDLE: pb.SESSION_STATE_IDLE,
    SessionState.RUNNING: pb.SESSION_STATE_RUNNING,
    SessionState.COMPACTING: pb.SESSION_STATE_COMPACTING,
}
_FAILURE_CODES = {
    "resource_exhausted": ErrorCode.STORAGE_FULL,
    "unavailable": ErrorCode.STORAGE_UNAVAILABLE,
}


class RunFailed(HubError):
    """The server stopped the run (its trace could not be written): the call
    that streamed it ends with this error after the task end, never as a
    success."""

    def __init__(self, failure: RunFailure) -> None:
        super().__init__(failure.message)
        self.failure = failure
        self.code = _FAILURE_CODES.get(failure.code, ErrorCode.INTERNAL)


# ---- requests ----------------------------------------------------------------


def run_request(request: pb.RunRequest) -> RunRequest:
    if request.thinking_level not in THINKING_LEVELS:
        raise InvalidRequest("thinking_level", f"unknown value {request.thinking_level}")
    if request.approval_mode not in APPROVAL_MODES:
        raise InvalidRequest("approval_mode", f"unknown value {request.approval_mode}")
    messages = list(request.input)
    if request.prompt:
        # Stamped as it arrives (as ``stamped`` would), so the run holds this
        # one message and not a stamped copy of a prompt that may be megabytes.
        prompt = protocol.user_text(request.prompt, timestamp=protocol.now_timestamp())
        messages.append(message_from_dict(prompt))
        del prompt
    if not messages:
        raise InvalidRequest("input", "set input messages or a prompt")
    metadata = json_format.MessageToDict(request.metadata) if request.HasField("metadata") else {}
    return RunRequest(
        input=messages,
        session_id=request.session_id or None,
        thinking_level=THINKING_LEVELS[request.thinking_level],
        approval_mode=APPROVAL_MODES[request.approval_mode],
        metadata=metadata,
    )


async def checked_run_request(hub: Runtime, request: pb.RunRequest) -> RunRequest:
    """``run_request``, refusing input the codec or the protocol rejects
    (protocol/run_input.py) before anything is recorded or published."""
    run = run_request(request)
    calls: set[str] = set()
    if request.session_id and any(m.HasField("tool_call_output") for m in run.input):
        calls = tool_calls_made([m async for m in await hub.history(request.session_id)])
    try:
        check_run_input(run.input, calls)
    except InputProblem as exc:
        raise InvalidRequest(exc.field, exc.reason) from None
    return run


def page_token(value: str) -> Position | None:
    """A GetHistory page token (a window cursor); None for the newest page."""
    if not value:
        return None
    cursor = parse_cursor(value)
    if cursor is None:
        raise InvalidRequest("page_token", f"not a token GetHistory gave out: {value!r}")
    return cursor


def require(value: str, field: str) -> str:
    if not value:
        raise InvalidRequest(field, "is required")
    return value


def decision(value: int) -> Decision:
    if value not in DECISIONS:
        raise InvalidRequest(
            "decision", "must be DECISION_ALLOW, DECISION_DENY or DECISION_FORBIDDEN"
        )
    return DECISIONS[value]


# ---- responses ---------------------------------------------------------------


def run_response(event: HubEvent, session_id: str, *, with_json: bool = False) -> pb.RunResponse:
    response = pb.RunResponse(event_id=event.event_id, session_id=session_id)
    _fill(response, event, with_json)
    return response


def attach_response(
    event: HubEvent, session_id: str, *, with_json: bool = False
) -> pb.AttachResponse:
    response = pb.AttachResponse(event_id=event.event_id, session_id=session_id)
    _fill(response, event, with_json)
    return response


def _fill(response: pb.RunResponse | pb.AttachResponse, event: HubEvent, with_json: bool) -> None:
    if event.message is not None:
        response.message.CopyFrom(event.message)
    elif event.server_event is not None:
        response.event.CopyFrom(event.server_event)
    if with_json:
        # The hub serialized the event once for the trace and SSE: the same bytes.
        response.json = event.data.decode("utf-8")


def _varint(value: int) -> bytes:
    if value < 0x80:
        return _BYTE[value]
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_BYTE = [bytes((n,)) for n in range(0x80)]
# The tags of the length-delimited fields 1 to 5 (number << 3 | 2).
_EVENT_ID, _MESSAGE, _EVENT, _SESSION_ID, _JSON = (bytes((n << 3 | 2,)) for n in range(1, 6))


def _encode(event: HubEvent, session_id: str, with_json: bool) -> bytes:
    event_id = event.event_id.encode()
    wire = event.wire
    session = session_id.encode()
    parts = [
        _EVENT_ID, _varint(len(event_id)), event_id,
        # Written even when empty: its presence sets the oneof.
        _MESSAGE if event.body.is_message else _EVENT, _varint(len(wire)), wire,
        _SESSION_ID, _varint(len(session)), session,
    ]  # fmt: skip
    if with_json:
        # The hub encoded the event once for the trace and SSE: the same bytes.
        data = event.data
        parts += (_JSON, _varint(len(data)), data)
    return b"".join(parts)


def response_bytes(event: HubEvent, session_id: str, *, with_json: bool = False) -> bytes:
    """The event's Run/Attach response as sent, built for its first subscriber."""
    return event.memo(
        ("grpc-response", session_id, with_json), lambda: _encode(event, session_id, with_json)
    )


def session_info(info: SessionInfo) -> pb.SessionInfo:
    return pb.SessionInfo(
        session_id=info.session_id,
        state=_STATES.get(info.state, pb.SESSION_STATE_UNSPECIFIED),
        created_at=info.created_at,
        updated_at=info.updated_at,
        message_count=info.message_count,
        last_event_id=info.last_event_id or "",
    )


# ---- the calls ---------------------------------------------------------------


class RunCall:
    """One Run call: its session, its events to the task end, and what its end
    means for the task (``close``)."""

    def __init__(
        self,
        hub: Runtime,
        session_id: str,
        sub: Subscription,
        detach: bool,
        context: CallContext | None = None,
    ) -> None:
        self.hub = hub
        self.session_id = session_id
        self._sub = sub
        self._detach = detach
        self._context = context
        self.finished = False
        self._last: str | None = None
        self._missed: EventsMissed | None = None
        # What the call ends with after its task end (raised by the next read).
        self._after_end: HubError | None = None

    async def next(self) -> HubEvent | None:
        """The run's next event through its ``task_state idle``, then None.
        The read after a task end the server caused raises ``RunFailed``,
        and after the task end of a stream that was cut off behind the window
        ``EventsMissed`` (it goes on live; what it missed is in history); any
        read raises ``BackendUnavailable`` when the shared log goes away
        mid-stream. A transport that sends each event as it reads it loops
        on this, without an async generator per event (``events`` is one)."""
        if self.finished:
            error, self._after_end = self._after_end, None
            if error is not None:
                raise error
            return None
        event = await self._sub.next()
        if event is None:
            return None
        if self._missed is None and is_resync(event):
            self._missed = EventsMissed(self.session_id, self._last, event.event_id)
        self._last = event.event_id
        if is_task_end(event):
            self.finished = True
            if event.failure is not None:
                self._after_end = RunFailed(event.failure)
            elif self._missed is not None:
                self._after_end = self._missed
        return event

    async def events(self) -> AsyncIterator[HubEvent]:
        """``next`` as an iterator: the events, then what the call ends with."""
        while (event := await self.next()) is not None:
            yield event
            del event  # let go once sent, not held while waiting (fanout._iterate)

    async def close(self) -> None:
        """Ends the call: a Run left before its task end is aborted, unless
        its caller asked to detach (``detach_on_cancel``)."""
        self._sub.close()
        if not self.finished and not self._detach:
            # Ended by its deadline, the run says so, as the runtime's timer does.
            expired = self._context is not None and self._context.expired
            reason = DEADLINE_REASON if expired else CANCEL_REASON
            with contextlib.suppress(HubError):
                await self.hub.abort(self.session_id, reason, AbortKind.CLIENT_GONE)


class AttachCall:
    """One Attach call: a replay, then the live stream, until the client
    leaves or the stream ends."""

    def __init__(self, hub: Runtime, session_id: str, sub: Subscription) -> None:
        self.hub = hub
        self.session_id = session_id
        self._sub = sub
        self._ended = False

    async def next(self) -> HubEvent | None:
        """The session's next event; None once the stream has ended. A stream
        that ended without its client leaving raises ``SessionDeleted`` when
        the session was deleted (the server stopping ends it plainly)."""
        if self._ended:
            return None
        event = await self._sub.next()
        if event is not None:
            return event
        self._ended = True
        try:
            await self.hub.require_session(self.session_id)
        except SessionNotFound:
            raise SessionDeleted(self.session_id) from None
        except HubError:
            pass  # the shared store went away with the server
        return None

    async def events(self) -> AsyncIterator[HubEvent]:
        """``next`` as an iterator."""
        while (event := await self.next()) is not None:
            yield event
            del event  # let go once sent, not held while waiting (fanout._iterate)

    async def close(self) -> None:
        self._sub.close()


class AgentCalls:
    """Every AgentService method over one runtime. A method raises the
    ``HubError`` that refuses its request before anything is sent."""

    def __init__(self, hub: Runtime) -> None:
        self.hub = hub

    async def run(self, request: pb.RunRequest, context: CallContext | None = None) -> RunCall:
        if context is not None and request.detach_on_cancel:
            # A run that outlives its call does not end with the call's deadline.
            context = replace(context, deadline=None)
        session_id, sub = await self.hub.run(await checked_run_request(self.hub, request), context)
        return RunCall(self.hub, session_id, sub, request.detach_on_cancel, context)

    async def attach(self, request: pb.AttachRequest) -> AttachCall:
        session_id = require(request.session_id, "session_id")
        sub = await self.hub.attach(session_id, request.after_event_id or None)
        return AttachCall(self.hub, session_id, sub)

    async def approve(self, request: pb.ApproveRequest) -> pb.ApproveResponse:
        await self.hub.approve(
            require(request.session_id, "session_id"),
            require(request.tool_call_id, "tool_call_id"),
            decision(request.decision),
        )
        return pb.ApproveResponse()

    async def abort(self, request: pb.AbortRequest) -> pb.AbortResponse:
        session_id = require(request.session_id, "session_id")
        was_running = await self.hub.abort(session_id, request.reason or None)
        return pb.AbortResponse(was_running=was_running)

    async def get_history(
        self, request: pb.GetHistoryRequest
    ) -> AsyncIterator[pb.GetHistoryResponse]:
        """The history's responses; the request is checked (and the session
        found) before this returns."""
        token = ""
        session_id = require(request.session_id, "session_id")
        if request.page_size:
            page = await self.hub.history_window(
                session_id, request.page_size, page_token(request.page_token)
            )
            messages = _each(msg for _, msg in page.messages)
            token = format_cursor(page.before) if page.before is not None else ""
        elif request.page_token:
            raise InvalidRequest("page_token", "only applies with page_size")
        else:
            messages = await self.hub.history(session_id)
        return _history_responses(messages, token, request.include_json)

    async def delete_session(self, request: pb.DeleteSessionRequest) -> pb.DeleteSessionResponse:
        session_id = require(request.session_id, "session_id")
        was_running = await self.hub.delete_session(session_id, delete_trace=request.delete_trace)
        return pb.DeleteSessionResponse(was_running=was_running, trace_deleted=request.delete_trace)

    async def list_sessions(self, _request: pb.ListSessionsRequest) -> pb.ListSessionsResponse:
        infos = await self.hub.list_sessions()
        return pb.ListSessionsResponse(sessions=[session_info(i) for i in infos])


async def _history_responses(
    messages: AsyncIterator[omni_pb2.OmniMessage], token: str, include_json: bool
) -> AsyncIterator[pb.GetHistoryResponse]:
    async for message in messages:
        response = pb.GetHistoryResponse(message=message, next_page_token=token)
        token = ""  # on the page's first message only
        if include_json:
            # The codec gives back each trace line's exact bytes.
            response.json = serialize_message(message).decode("utf-8")
        yield response


async def _each(messages: Iterable[omni_pb2.OmniMessage]) -> AsyncIterator[omni_pb2.OmniMessage]:
    for message in messages:
        yield message
