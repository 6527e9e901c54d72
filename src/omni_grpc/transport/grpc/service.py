"""AgentService over gRPC: the runtime's calls (``runtime.agent_service``),
their refusals as gRPC statuses, their events as prebuilt responses."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc

from omni_grpc.runtime.agent_service import AgentCalls, response_bytes
from omni_grpc.runtime.errors import HubError
from omni_grpc.runtime.interface import CallContext, Runtime
from omni_grpc.transport.grpc.status import abort_with
from omni_grpc.vocabulary import MAX_ATTEMPTS_HEADER
from omni_grpc.vocabulary import SESSION_HEADER as SESSION_HEADER
from omni_grpc_proto.omni.v1 import agent_service_pb2 as pb
from omni_grpc_proto.omni.v1 import agent_service_pb2_grpc


class AgentService(agent_service_pb2_grpc.AgentServiceServicer):  # type: ignore[misc]
    def __init__(self, hub: Runtime) -> None:
        self.hub = hub
        self.calls = AgentCalls(hub)

    def _metadata(self, session_id: str) -> tuple[tuple[str, str], ...]:
        attempts = self.hub.engine_max_attempts
        if attempts is None:
            return ((SESSION_HEADER, session_id),)
        return ((SESSION_HEADER, session_id), (MAX_ATTEMPTS_HEADER, str(attempts)))

    async def Run(self, request: pb.RunRequest, context: grpc.aio.ServicerContext) -> None:
        # Sends with context.write (RunResponse bytes, see responses.py): a
        # coroutine, not an async generator, so no interceptor wraps each
        # event in a generator of its own (transport/grpc/handlers.py).
        with_json = request.include_json
        try:
            call = await self.calls.run(request, call_context(context))
        except HubError as exc:
            await abort_with(context, exc)
        # The run has its input: the request (a prompt may be megabytes) is
        # not held while it streams (released_request.py).
        del request
        try:
            await context.send_initial_metadata(self._metadata(call.session_id))
            session_id, write, take = call.session_id, context.write, call.next
            try:
                while (event := await take()) is not None:
                    # Encoded once per event for all its subscribers.
                    await write(response_bytes(event, session_id, with_json=with_json))
                    # Not held while waiting for the next event: a large one and
                    # its response are let go once sent.
                    del event
            except HubError as exc:  # a failed run, or the shared log gone mid-stream
                await abort_with(context, exc)
        finally:
            # Cancellation reaches the work unless the caller asked to detach.
            await call.close()

    async def Attach(self, request: pb.AttachRequest, context: grpc.aio.ServicerContext) -> None:
        # AttachResponse bytes, sent as in Run.
        try:
            call = await self.calls.attach(request)
        except HubError as exc:
            await abort_with(context, exc)
        try:
            await context.send_initial_metadata(self._metadata(call.session_id))
            session_id, write, take = call.session_id, context.write, call.next
            with_json = request.include_json
            try:
                while (event := await take()) is not None:
                    await write(response_bytes(event, session_id, with_json=with_json))
                    del event  # as in Run
            except HubError as exc:  # deleted, or the shared log gone mid-stream
                await abort_with(context, exc)
        finally:
            await call.close()

    async def Approve(
        self, request: pb.ApproveRequest, context: grpc.aio.ServicerContext
    ) -> pb.ApproveResponse:
        try:
            return await self.calls.approve(request)
        except HubError as exc:
            await abort_with(context, exc)

    async def Abort(
        self, request: pb.AbortRequest, context: grpc.aio.ServicerContext
    ) -> pb.AbortResponse:
        try:
            return await self.calls.abort(request)
        except HubError as exc:
            await abort_with(context, exc)

    async def GetHistory(
        self, request: pb.GetHistoryRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.GetHistoryResponse]:
        try:
            responses = await self.calls.get_history(request)
        except HubError as exc:
            await abort_with(context, exc)
        async for response in responses:
            yield response

    async def DeleteSession(
        self, request: pb.DeleteSessionRequest, context: grpc.aio.ServicerContext
    ) -> pb.DeleteSessionResponse:
        try:
            return await self.calls.delete_session(request)
        except HubError as exc:
            await abort_with(context, exc)

    async def ListSessions(
        self, request: pb.ListSessionsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListSessionsResponse:
        try:
            return await self.calls.list_sessions(request)
        except HubError as exc:
            await abort_with(context, exc)


def call_context(context: grpc.aio.ServicerContext) -> CallContext:
    """The runtime's view of a gRPC call: its deadline and its metadata (the
    token was checked by the interceptor and stays out of it)."""
    metadata = {
        key: value
        for key, value in context.invocation_metadata() or ()
        if key != "authorization" and isinstance(value, str)
    }
    return CallContext.with_timeout(context.time_remaining(), metadata=metadata)
