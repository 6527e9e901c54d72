"""``AgentClient``: the AgentService from Python, as async iterators and calls."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import grpc
from google.protobuf import struct_pb2

from omni_grpc.client.errors import AgentError
from omni_grpc.client.events import StreamEvent
from omni_grpc.message_size import GRPC_MAX_MESSAGE_BYTES
from omni_grpc.vocabulary import MAX_ATTEMPTS_HEADER, ApprovalMode, Decision, ThinkingLevel
from omni_grpc.vocabulary import SESSION_HEADER as SESSION_HEADER
from omni_grpc_proto.omni.v1 import agent_service_pb2 as pb
from omni_grpc_proto.omni.v1 import agent_service_pb2_grpc, omni_pb2

_T = TypeVar("_T")

# The codes a stream that broke on the way arrives with: UNAVAILABLE from a
# lost connection or a replica going away, INTERNAL from nginx's RST_STREAM
# when its upstream died, UNKNOWN from a stream reset mid-message. Any other
# code is the server's answer, and asking again would get it again.
RESUMABLE_CODES = frozenset(
    {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN}
)
# Re-attaches in a row without an event in between, and the pause before
# each: 0.25 s doubling up to 4 s (about 20 s in all with 8 attempts).
RESUME_ATTEMPTS = 8
_FIRST_PAUSE, _LONGEST_PAUSE = 0.25, 4.0
APPROVAL_MODES: dict[str, pb.ApprovalMode] = {
    # The short forms are the CLI's --approve allow|deny.
    Decision.ALLOW: pb.APPROVAL_MODE_ALLOW_ALL,
    ApprovalMode.ALLOW_ALL: pb.APPROVAL_MODE_ALLOW_ALL,
    Decision.DENY: pb.APPROVAL_MODE_DENY_ALL,
    ApprovalMode.DENY_ALL: pb.APPROVAL_MODE_DENY_ALL,
    ApprovalMode.READ_ONLY: pb.APPROVAL_MODE_READ_ONLY,
    ApprovalMode.ASK: pb.APPROVAL_MODE_ASK,
}
THINKING_LEVELS: dict[str, pb.ThinkingLevel] = {
    ThinkingLevel.NONE: pb.THINKING_LEVEL_NONE,
    ThinkingLevel.LOW: pb.THINKING_LEVEL_LOW,
    ThinkingLevel.MEDIUM: pb.THINKING_LEVEL_MEDIUM,
    ThinkingLevel.HIGH: pb.THINKING_LEVEL_HIGH,
    ThinkingLevel.XHIGH: pb.THINKING_LEVEL_XHIGH,
    ThinkingLevel.MAX: pb.THINKING_LEVEL_MAX,
}
DECISIONS: dict[str, omni_pb2.Decision] = {
    Decision.ALLOW: omni_pb2.DECISION_ALLOW,
    Decision.DENY: omni_pb2.DECISION_DENY,
    Decision.FORBIDDEN: omni_pb2.DECISION_FORBIDDEN,
}


def outgoing_metadata(metadata: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """The call's metadata plus the trace context, if there can be one: only a
    process that loaded OpenTelemetry has a span to propagate, and one that
    did not (the CLI) skips importing it, a third of its start-up."""
    if "opentelemetry.context" not in sys.modules:
        return metadata
    from omni_grpc import propagation

    return propagation.outgoing_metadata(metadata)


def _read(value: Path | str | bytes | None) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    return Path(value).read_bytes()


def _max_attempts(metadata: Any) -> int | None:
    """The engine's attempts per request, when the server's metadata says."""
    for key, value in metadata or ():
        if key == MAX_ATTEMPTS_HEADER and str(value).isdigit():
            return int(value)
    return None


_SERVICE = pb.DESCRIPTOR.services_by_name["AgentService"].full_name
_RUN, _ATTACH = f"/{_SERVICE}/Run", f"/{_SERVICE}/Attach"


def _event(response: StreamEvent | pb.RunResponse | pb.AttachResponse) -> StreamEvent:
    """A streamed response as an event (the calls above read them as events
    already; a call made with the generated stub gives messages)."""
    if isinstance(response, StreamEvent):
        return response
    return StreamEvent.from_response(response)


class RunStream:
    """The events of one Run call. ``session_id`` is known once the server answers."""

    def __init__(self, call: Any) -> None:
        self._call = call
        self.session_id: str | None = None
        # The engine's attempts per model request (initial metadata), if the
        # server says: known once the first event has arrived.
        self.max_attempts: int | None = None
        # The task's closing task_state idle arrived (held back or not): an
        # error after it is how the server ended the run, not a lost call.
        self.task_ended = False

    def __aiter__(self) -> AsyncIterator[StreamEvent]:
        return self._events()

    async def _events(self) -> AsyncIterator[StreamEvent]:
        # The ``task_state idle`` closing the task is held back until the call
        # has ended: a run the server had to stop (its trace could not be
        # written) still closes with idle, and only the status that follows
        # says it failed. A caller that stops at the task end would otherwise
        # take a failure for success; this way it gets the AgentError instead.
        held: StreamEvent | None = None
        try:
            async for response in self._call:
                event = _event(response)
                if self.session_id is None:
                    self._read_metadata(await self._call.initial_metadata())
                self.session_id = event.session_id
                if held is not None:
                    yield held
                    held = None
                if event.is_task_end:
                    held, self.task_ended = event, True
                else:
                    yield event
        except grpc.aio.AioRpcError as exc:
            raise AgentError.from_rpc_error(exc) from None
        if held is not None:
            yield held

    async def session(self) -> str:
        """The session id from the initial metadata (before any event arrives)."""
        try:
            metadata = await self._call.initial_metadata()
        except grpc.aio.AioRpcError as exc:
            raise AgentError.from_rpc_error(exc) from None
        self._read_metadata(metadata)
        if self.session_id is None:
            await self._call.code()  # the call failed before answering: surface why
            raise AgentError(grpc.StatusCode.UNKNOWN, "no session id in the response", [])
        return self.session_id

    def _read_metadata(self, metadata: Any) -> None:
        for key, value in metadata or ():
            if key == SESSION_HEADER:
                self.session_id = str(value)
        self.max_attempts = _max_attempts(metadata)

    def cancel(self) -> None:
        """Cancels the call; the server aborts the run unless it was detached."""
        self._call.cancel()


class AgentClient:
    """A client of one AgentService server.

    ``token`` is sent as ``authorization: Bearer``. Pass ``tls=True`` (system
    roots) or ``tls_ca`` for TLS, plus ``tls_cert``/``tls_key`` for mTLS.
    """

    def __init__(
        self,
        target: str,
        *,
        token: str | None = None,
        tls: bool = False,
        tls_ca: Path | str | bytes | None = None,
        tls_cert: Path | str | bytes | None = None,
        tls_key: Path | str | bytes | None = None,
        max_message_bytes: int = GRPC_MAX_MESSAGE_BYTES,
        options: Sequence[tuple[str, Any]] = (),
    ) -> None:
        opts = [
            ("grpc.max_receive_message_length", max_message_bytes),
            ("grpc.max_send_message_length", max_message_bytes),
            *options,
        ]
        if tls or tls_ca is not None or tls_cert is not None:
            credentials = grpc.ssl_channel_credentials(
                root_certificates=_read(tls_ca),
                private_key=_read(tls_key),
                certificate_chain=_read(tls_cert),
            )
            self._channel = grpc.aio.secure_channel(target, credentials, options=opts)
        else:
            self._channel = grpc.aio.insecure_channel(target, options=opts)
        self._metadata: tuple[tuple[str, str], ...] = (
            (("authorization", f"Bearer {token}"),) if token else ()
        )
        self._stub = agent_service_pb2_grpc.AgentServiceStub(self._channel)
        # Run and Attach read each response into a StreamEvent straight from
        # its bytes, keeping the message's own (``StreamEvent.wire``).
        self._run = self._channel.unary_stream(
            _RUN,
            request_serializer=pb.RunRequest.SerializeToString,
            response_deserializer=StreamEvent.from_bytes,
        )
        self._attach = self._channel.unary_stream(
            _ATTACH,
            request_serializer=pb.AttachRequest.SerializeToString,
            response_deserializer=StreamEvent.from_bytes,
        )
        # The engine's attempts per model request, from the last Attach's
        # initial metadata (a Run's is on its RunStream).
        self.max_attempts: int | None = None

    async def __aenter__(self) -> AgentClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        await self._channel.close()

    def run(
        self,
        prompt: str | None = None,
        *,
        input: Iterable[omni_pb2.OmniMessage] = (),
        session_id: str | None = None,
        thinking_level: str | None = None,
        approval_mode: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        detach_on_cancel: bool = False,
        include_json: bool = False,
        timeout: float | None = None,
    ) -> RunStream:
        """Starts a task; iterate the result for its events (through ``task_state idle``,
        which comes only once the call ended well: a run that failed raises
        AgentError in its place).
        ``include_json`` has the server send each event's reference JSON too
        (``StreamEvent.json``)."""
        request = pb.RunRequest(
            session_id=session_id or "",
            input=list(input),
            prompt=prompt or "",
            detach_on_cancel=detach_on_cancel,
            include_json=include_json,
        )
        if thinking_level is not None:
            request.thinking_level = _lookup(THINKING_LEVELS, thinking_level, "thinking_level")
        if approval_mode is not None:
            request.approval_mode = _lookup(APPROVAL_MODES, approval_mode, "approval_mode")
        if metadata:
            struct = struct_pb2.Struct()
            struct.update(dict(metadata))
            request.metadata.CopyFrom(struct)
        return RunStream(
            self._run(request, metadata=outgoing_metadata(self._metadata), timeout=timeout)
        )

    async def attach(
        self,
        session_id: str,
        after_event_id: str | None = None,
        *,
        until_idle: bool = False,
        include_json: bool = False,
    ) -> AsyncIterator[StreamEvent]:
        """The session's live stream after ``after_event_id``. It stays open across
        tasks; ``until_idle`` ends it once the session is idle (after the replay)."""
        request = pb.AttachRequest(
            session_id=session_id, after_event_id=after_event_id or "", include_json=include_json
        )
        call = self._attach(request, metadata=outgoing_metadata(self._metadata))
        first = True
        try:
            async for response in call:
                event = _event(response)
                if first:
                    first = False
                    self.max_attempts = _max_attempts(await call.initial_metadata())
                yield event
                if until_idle and event.is_task_end:
                    break
        except grpc.aio.AioRpcError as exc:
            raise AgentError.from_rpc_error(exc) from None
        finally:
            call.cancel()

    async def follow(
        self,
        session_id: str,
        after_event_id: str | None = None,
        *,
        run: RunStream | None = None,
        until_idle: bool = False,
        include_json: bool = False,
        attempts: int = RESUME_ATTEMPTS,
        on_resume: Callable[[AgentError, int, str], None] | None = None,
    ) -> AsyncIterator[StreamEvent]:
        """``attach`` that survives a broken stream: on a code in
        ``RESUMABLE_CODES`` it attaches again after the last event id it
        received, so nothing is lost or repeated while the server still buffers
        the gap (past it, a ``@resync_required`` says so). It gives up, raising
        the last AgentError, after ``attempts`` tries in a row without an event.
        ``on_resume(error, attempt, last_event_id)`` is called before each.

        With ``run`` (a Run started with ``detach_on_cancel=True``, so that the
        task outlives a broken call) its events come first, then the task is
        followed by Attach until its end. An error after the run's own task end
        is how the run ended, and is raised as it is.
        """
        stream: AsyncIterator[StreamEvent] = (
            aiter(run)
            if run is not None
            else self.attach(
                session_id, after_event_id, until_idle=until_idle, include_json=include_json
            )
        )
        until_idle = until_idle or run is not None
        last = after_event_id or ""
        failed, pause = 0, _FIRST_PAUSE
        while True:
            try:
                async for event in stream:
                    failed, pause = 0, _FIRST_PAUSE
                    last = event.event_id or last
                    yield event
                return
            except AgentError as exc:
                ended = run is not None and run.task_ended
                if exc.code not in RESUMABLE_CODES or failed >= attempts or ended:
                    raise
                failed += 1
                if on_resume is not None:
                    on_resume(exc, failed, last)
                await asyncio.sleep(pause)
                pause = min(pause * 2, _LONGEST_PAUSE)
                run = None
                stream = self.attach(
                    session_id, last or None, until_idle=until_idle, include_json=include_json
                )

    async def approve(self, session_id: str, tool_call_id: str, decision: str) -> None:
        request = pb.ApproveRequest(
            session_id=session_id,
            tool_call_id=tool_call_id,
            decision=_lookup(DECISIONS, decision, "decision"),
        )
        await self._unary(self._stub.Approve, request)

    async def abort(self, session_id: str, reason: str | None = None) -> bool:
        """True when a task was running."""
        request = pb.AbortRequest(session_id=session_id, reason=reason or "")
        response: pb.AbortResponse = await self._unary(self._stub.Abort, request)
        return response.was_running

    async def delete_session(self, session_id: str, *, delete_trace: bool = False) -> bool:
        """Ends the session (DeleteSession): a running task is aborted first,
        then the session leaves the server's index. Its trace is kept under
        the server's ``deleted/`` folder, or removed with ``delete_trace``.
        True when a task was running."""
        request = pb.DeleteSessionRequest(session_id=session_id, delete_trace=delete_trace)
        response: pb.DeleteSessionResponse = await self._unary(self._stub.DeleteSession, request)
        return response.was_running

    async def history(
        self, session_id: str, *, page_size: int = 0, page_token: str = ""
    ) -> AsyncIterator[omni_pb2.OmniMessage]:
        """The session's recorded messages; with ``page_size``, only the newest
        that many tasks (before ``page_token``: see :meth:`history_page`)."""
        request = pb.GetHistoryRequest(
            session_id=session_id, page_size=page_size, page_token=page_token
        )
        call = self._stub.GetHistory(request, metadata=outgoing_metadata(self._metadata))
        try:
            async for response in call:
                yield response.message
        except grpc.aio.AioRpcError as exc:
            raise AgentError.from_rpc_error(exc) from None

    async def history_lines(self, session_id: str, *, page_size: int = 0) -> AsyncIterator[bytes]:
        """The session's trace as the server holds it: each message's exact
        reference JSON (a trace line without its newline); with
        ``page_size``, the lines of the newest that many tasks."""
        call = self._stub.GetHistory(
            pb.GetHistoryRequest(session_id=session_id, include_json=True, page_size=page_size),
            metadata=outgoing_metadata(self._metadata),
        )
        try:
            async for response in call:
                yield response.json.encode("utf-8")
        except grpc.aio.AioRpcError as exc:
            raise AgentError.from_rpc_error(exc) from None

    async def history_page(
        self, session_id: str, page_size: int, page_token: str = ""
    ) -> tuple[list[omni_pb2.OmniMessage], str]:
        """One page of ``page_size`` tasks, newest first: its messages in trace
        order and the token of the page before it ("" at the oldest)."""
        request = pb.GetHistoryRequest(
            session_id=session_id, page_size=page_size, page_token=page_token
        )
        messages, token = [], ""
        try:
            async for response in self._stub.GetHistory(
                request, metadata=outgoing_metadata(self._metadata)
            ):
                messages.append(response.message)
                token = token or response.next_page_token
        except grpc.aio.AioRpcError as exc:
            raise AgentError.from_rpc_error(exc) from None
        return messages, token

    async def list_sessions(self) -> list[pb.SessionInfo]:
        response: pb.ListSessionsResponse = await self._unary(
            self._stub.ListSessions, pb.ListSessionsRequest()
        )
        return list(response.sessions)

    async def _unary(self, method: Any, request: Any) -> Any:
        try:
            return await method(request, metadata=outgoing_metadata(self._metadata))
        except grpc.aio.AioRpcError as exc:
            raise AgentError.from_rpc_error(exc) from None


def _lookup(table: Mapping[str, _T], value: str, name: str) -> _T:
    try:
        return table[value]
    except KeyError:
        raise ValueError(f"{name} must be one of {', '.join(table)}, not {value!r}") from None
