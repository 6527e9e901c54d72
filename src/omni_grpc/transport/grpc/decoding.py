"""Undecodable requests and unexpected errors as proper gRPC statuses.

grpcio answers a request its deserializer cannot parse (garbage bytes, invalid
UTF-8 in a string field, nesting past protobuf's recursion limit) with
``UNKNOWN: Unexpected <class '...DecodeError'>``, and an exception escaping a
handler with its text, which can name files on the server. This interceptor
makes the first ``INVALID_ARGUMENT`` naming the request type, and the second
``INTERNAL`` with a fixed sentence: not even the exception's type, which names
the server's internals (the log has it all). It wraps every behavior shape
grpc.aio takes (see ``handlers``): grpcio-health's ``Watch`` is a coroutine.
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from omni_grpc.transport.grpc.handlers import stream_responses, unary_response

log = logging.getLogger(__name__)

# An absolute path, as exception texts quote them.
_ABSOLUTE_PATH = re.compile(r"(?<![\w.:/])/(?:[^\s'\"/:]+/)+[^\s'\",:)]*")


def without_paths(text: str) -> str:
    """``text`` with absolute filesystem paths replaced by ``<path>``."""
    return _ABSOLUTE_PATH.sub("<path>", text)


class _Undecodable:
    """Stands in for a request whose bytes did not parse."""

    def __init__(self, type_name: str, reason: str) -> None:
        self.type_name = type_name
        self.reason = reason


def _guarded(deserializer: Callable[[bytes], Any] | None, method: str) -> Callable[[bytes], Any]:
    type_name = method.rsplit("/", 1)[-1] + " request"
    owner = getattr(deserializer, "__self__", None)
    if isinstance(owner, type):
        type_name = owner.__name__

    def deserialize(data: bytes) -> Any:
        if deserializer is None:
            return data
        try:
            return deserializer(data)
        except (DecodeError, RecursionError, UnicodeDecodeError, ValueError) as exc:
            return _Undecodable(type_name, without_paths(str(exc)) or type(exc).__name__)

    return deserialize


async def _refuse(request: _Undecodable, context: grpc.aio.ServicerContext) -> None:
    await context.abort(
        grpc.StatusCode.INVALID_ARGUMENT,
        f"the request is not a valid {request.type_name}: {request.reason}",
    )


# What a client is told of an error the server did not expect.
INTERNAL_MESSAGE = "internal server error"


class DecodeGuardInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        if handler is None or handler.request_streaming:
            return handler
        method = details.method
        deserialize = _guarded(handler.request_deserializer, method)
        kw = {
            "request_deserializer": deserialize,
            "response_serializer": handler.response_serializer,
        }
        if handler.unary_unary:
            inner_unary = handler.unary_unary

            async def unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
                if isinstance(request, _Undecodable):
                    await _refuse(request, context)
                try:
                    return await unary_response(inner_unary, request, context)
                except (grpc.aio.AbortError, grpc.RpcError):
                    raise
                except Exception:
                    log.exception("%s failed", method)
                    await context.abort(grpc.StatusCode.INTERNAL, INTERNAL_MESSAGE)

            return grpc.unary_unary_rpc_method_handler(unary, **kw)
        inner_stream = handler.unary_stream

        async def stream(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            if isinstance(request, _Undecodable):
                await _refuse(request, context)
            responses = stream_responses(inner_stream, request, context)
            del request  # not held for the call (released_request.py)
            try:
                async for response in responses:
                    yield response
            except (grpc.aio.AbortError, grpc.RpcError):
                raise
            except Exception:
                log.exception("%s failed", method)
                await context.abort(grpc.StatusCode.INTERNAL, INTERNAL_MESSAGE)

        return grpc.unary_stream_rpc_method_handler(stream, **kw)
