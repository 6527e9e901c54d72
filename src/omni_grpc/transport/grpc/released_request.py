"""Run's request, let go once the run has started.

grpc.aio serves a method with one request by receiving its bytes, decoding
them, and awaiting the handler with both still referenced until the call
ends. For Run that is the prompt twice over for as long as the run streams:
a 60 MiB prompt kept 120 MiB of server memory that nothing read again.

This interceptor, first in the chain, serves Run through the reader API of
a stream-request method instead: the call reads its one request itself
(``context.read``) and hands it down, and each layer below lets it go once
it has handed it on (``handlers.stream_responses``, the decode guard, the
telemetry wrapper), ``AgentService.Run`` once it has started the run. The
interceptors below still see the method as declared (one request, streamed
responses): their metrics, guards and refusals are unchanged, and on the
wire nothing is.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from omni_grpc.transport.grpc.handlers import stream_responses
from omni_grpc_proto.omni.v1 import agent_service_pb2

_SERVICE = agent_service_pb2.DESCRIPTOR.services_by_name["AgentService"].full_name
# The methods whose request may be large: a prompt or input messages.
METHODS = frozenset({f"/{_SERVICE}/Run"})


class ReleasedRequestInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        if handler is None or details.method not in METHODS or handler.unary_stream is None:
            return handler
        inner = handler.unary_stream
        method = details.method

        async def serve(_requests: Any, context: grpc.aio.ServicerContext) -> None:
            request = await context.read()
            if request is grpc.aio.EOF:
                await context.abort(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"{method} takes one request message; the call ended without one",
                )
            responses = stream_responses(inner, request, context)
            del request
            try:
                async for response in responses:
                    await context.write(response)
            finally:
                # At once, not when collected: a Run its client left is
                # aborted by the handler's own cleanup.
                await responses.aclose()

        return grpc.stream_stream_rpc_method_handler(
            serve,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )
