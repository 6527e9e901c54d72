"""AgentService over the hub: decode, call the hub, stream what it yields."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Iterable

import grpc

from omni_grpc.convert import serialize_message
from omni_grpc.runtime.errors import (
    BackendUnavailable,
    HubError,
    InvalidRequest,
    SessionDeleted,
    SessionNotFound,
)
from omni_grpc.runtime.interface import HubEvent, Runtime, SessionInfo, is_task_end
from omni_grpc.trace.window import format_cursor
from omni_grpc.transport.grpc import requests
from omni_grpc.transport.grpc.responses import response_bytes
from omni_grpc.transport.grpc.status import abort_with
from omni_grpc.vocabulary import SESSION_HEADER as SESSION_HEADER
from omni_grpc.vocabulary import AbortKind, SessionState
from omni_grpc_proto.omni.v1 import agent_service_pb2 as pb
from omni_grpc_proto.omni.v1 import agent_service_pb2_grpc, omni_pb2

log = logging.getLogger(__name__)

CANCEL_REASON = "the Run call was cancelled"
_STATES = {
    SessionState.IDLE: pb.SESSION_STATE_IDLE,
    SessionState.RUNNING: pb.SESSION_STATE_RUNNING,
    SessionState.COMPACTING: pb.SESSION_STATE_COMPACTING,
}
_FAILURE_CODES = {
    "resource_exhausted": grpc.StatusCode.RESOURCE_EXHAUSTED,
    "unavailable": grpc.StatusCode.UNAVAILABLE,
}


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


def session_info(info: SessionInfo) -> pb.SessionInfo:
    return pb.SessionInfo(
        session_id=info.session_id,
        state=_STATES.get(info.state, pb.SESSION_STATE_UNSPECIFIED),
        created_at=info.created_at,
        updated_at=info.updated_at,
        message_count=info.message_count,
        last_event_id=info.last_event_id or "",
    )


class AgentService(agent_service_pb2_grpc.AgentServiceServicer):  # type: ignore[misc]
    def __init__(self, hub: Runtime) -> None:
        self.hub = hub

    async def Run(
        self, request: pb.RunRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[bytes]:  # RunResponse bytes (see responses.py)
        try:
            session_id, sub = await self.hub.run(
                await requests.checked_run_request(self.hub, request)
            )
        except HubError as exc:
            await abort_with(context, exc)
        finished = False
        try:
            await context.send_initial_metadata(((SESSION_HEADER, session_id),))
            try:
                async for event in sub:
                    # Encoded once per event for all its subscribers (see responses.py).
                    yield response_bytes(event, session_id, with_json=request.include_json)
                    if is_task_end(event):
                        finished = True
                        if event.failure is not None:
                            # The server stopped the run (its trace could not be
                            # written): the call must not end as a success.
                            await context.abort(
                                _FAILURE_CODES[event.failure.code], event.failure.message
                            )
                        break
            except BackendUnavailable as exc:  # the shared log went away mid-stream
                await abort_with(context, exc)
        finally:
            sub.close()
            # Cancellation reaches the work unless the caller asked to detach.
            if not finished and not request.detach_on_cancel:
                with contextlib.suppress(HubError):
                    await self.hub.abort(session_id, CANCEL_REASON, AbortKind.CLIENT_GONE)

    async def Attach(
        self, request: pb.AttachRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[bytes]:  # AttachResponse bytes
        try:
            session_id = requests.require(request.session_id, "session_id")
            sub = await self.hub.attach(session_id, request.after_event_id or None)
        except HubError as exc:
            await abort_with(context, exc)
        try:
            await context.send_initial_metadata(((SESSION_HEADER, session_id),))
            try:
                async for event in sub:
                    yield response_bytes(event, session_id, with_json=request.include_json)
            except BackendUnavailable as exc:  # the shared log went away mid-stream
                await abort_with(context, exc)
            await self._ended(context, session_id)
        finally:
            sub.close()

    async def _ended(self, context: grpc.aio.ServicerContext, session_id: str) -> None:
        """A stream that ended without its client leaving: the session was
        deleted (say so), or the server is stopping (end it plainly)."""
        try:
            await self.hub.require_session(session_id)
        except SessionNotFound:
            await abort_with(context, SessionDeleted(session_id))
        except HubError:
            pass  # the shared store went away with the server

    async def Approve(
        self, request: pb.ApproveRequest, context: grpc.aio.ServicerContext
    ) -> pb.ApproveResponse:
        try:
            await self.hub.approve(
                requests.require(request.session_id, "session_id"),
                requests.require(request.tool_call_id, "tool_call_id"),
                requests.decision(request.decision),
            )
        except HubError as exc:
            await abort_with(context, exc)
        return pb.ApproveResponse()

    async def Abort(
        self, request: pb.AbortRequest, context: grpc.aio.ServicerContext
    ) -> pb.AbortResponse:
        try:
            session_id = requests.require(request.session_id, "session_id")
            was_running = await self.hub.abort(session_id, request.reason or None)
        except HubError as exc:
            await abort_with(context, exc)
        return pb.AbortResponse(was_running=was_running)

    async def GetHistory(
        self, request: pb.GetHistoryRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.GetHistoryResponse]:
        token = ""
        try:
            session_id = requests.require(request.session_id, "session_id")
            if request.page_size:
                page = await self.hub.history_window(
                    session_id, request.page_size, requests.page_token(request.page_token)
                )
                messages = _each(msg for _, msg in page.messages)
                token = format_cursor(page.before) if page.before is not None else ""
            elif request.page_token:
                raise InvalidRequest("page_token", "only applies with page_size")
            else:
                messages = await self.hub.history(session_id)
        except HubError as exc:
            await abort_with(context, exc)
        async for message in messages:
            response = pb.GetHistoryResponse(message=message, next_page_token=token)
            token = ""  # on the page's first message only
            if request.include_json:
                # The codec gives back each trace line's exact bytes.
                response.json = serialize_message(message).decode("utf-8")
            yield response

    async def DeleteSession(
        self, request: pb.DeleteSessionRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteSessionResponse:
        try:
            session_id = requests.require(request.session_id, "session_id")
            was_running = await self.hub.delete_session(
                session_id, delete_trace=request.delete_trace
            )
        except HubError as exc:
            await abort_with(context, exc)
        return pb.DeleteSessionResponse(was_running=was_running, trace_deleted=request.delete_trace)

    async def ListSessions(
        self, request: pb.ListSessionsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListSessionsResponse:
        try:
            infos = await self.hub.list_sessions()
        except HubError as exc:
            await abort_with(context, exc)
        return pb.ListSessionsResponse(sessions=[session_info(i) for i in infos])


async def _each(messages: Iterable[omni_pb2.OmniMessage]) -> AsyncIterator[omni_pb2.OmniMessage]:
    for message in messages:
        yield message
