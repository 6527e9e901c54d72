"""A grpc.aio server interceptor: the grpc-ecosystem metrics and a span per RPC.

It goes first in the interceptor chain, so calls the auth interceptor refuses
are counted too (as ``Unauthenticated``). Only methods the server registered
are measured: an unknown method name comes from the client, and would make
the label set unbounded.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
from opentelemetry import trace
from prometheus_client import Counter, Histogram

from omni_grpc.observability import tracing
from omni_grpc.observability.metrics import ServerMetrics
from omni_grpc.transport.grpc.handlers import (
    Behavior,
    requests_for,
    stream_responses,
    unary_response,
)

# grpc.StatusCode -> the code names the Go interceptors write (codes.Code.String()).
GO_CODE_NAMES = {
    grpc.StatusCode.OK: "OK",
    grpc.StatusCode.CANCELLED: "Canceled",
    grpc.StatusCode.UNKNOWN: "Unknown",
    grpc.StatusCode.INVALID_ARGUMENT: "InvalidArgument",
    grpc.StatusCode.DEADLINE_EXCEEDED: "DeadlineExceeded",
    grpc.StatusCode.NOT_FOUND: "NotFound",
    grpc.StatusCode.ALREADY_EXISTS: "AlreadyExists",
    grpc.StatusCode.PERMISSION_DENIED: "PermissionDenied",
    grpc.StatusCode.RESOURCE_EXHAUSTED: "ResourceExhausted",
    grpc.StatusCode.FAILED_PRECONDITION: "FailedPrecondition",
    grpc.StatusCode.ABORTED: "Aborted",
    grpc.StatusCode.OUT_OF_RANGE: "OutOfRange",
    grpc.StatusCode.UNIMPLEMENTED: "Unimplemented",
    grpc.StatusCode.INTERNAL: "Internal",
    grpc.StatusCode.UNAVAILABLE: "Unavailable",
    grpc.StatusCode.DATA_LOSS: "DataLoss",
    grpc.StatusCode.UNAUTHENTICATED: "Unauthenticated",
}


def rpc_type(handler: grpc.RpcMethodHandler) -> str:
    if handler.request_streaming:
        return "bidi_stream" if handler.response_streaming else "client_stream"
    return "server_stream" if handler.response_streaming else "unary"


class _Method:
    """The metric children of one (type, service, method), resolved once."""

    def __init__(self, metrics: ServerMetrics, labels: tuple[str, str, str]) -> None:
        self.labels = labels
        self.started: Counter = metrics.grpc_started.labels(*labels)
        self.messages = metrics.grpc_message_tally(labels)
        self.seconds: Histogram = metrics.grpc_handling_seconds.labels(*labels)
        self._handled = metrics.grpc_handled
        self._codes: dict[str, Counter] = {}

    def handled(self, code: str) -> None:
        child = self._codes.get(code)
        if child is None:
            child = self._codes[code] = self._handled.labels(*self.labels, code)
        child.inc()


class _Call:
    """One RPC: its metrics, its span, and how it ended."""

    def __init__(
        self,
        method: _Method | None,
        tracer: trace.Tracer | None,
        details: grpc.HandlerCallDetails,
    ) -> None:
        self.method = method
        self.start = time.perf_counter()
        self.span: trace.Span | None = None
        self.token: Any = None
        if method is not None:
            method.started.inc()
        if tracer is not None:
            service, _, name = details.method.lstrip("/").partition("/")
            parent = tracing.extract_pairs(details.invocation_metadata)
            self.span = tracer.start_span(
                f"{service}/{name}",
                context=parent,
                kind=trace.SpanKind.SERVER,
                attributes={"rpc.system": "grpc", "rpc.service": service, "rpc.method": name},
            )
            self.token = tracing.attach_span(self.span)

    def received(self) -> None:
        if self.method is not None:
            self.method.messages.received += 1

    def sent(self) -> None:
        if self.method is not None:
            self.method.messages.sent += 1

    def end(self, code: grpc.StatusCode, error: BaseException | None = None) -> None:
        if self.method is not None:
            self.method.handled(GO_CODE_NAMES.get(code, "Unknown"))
            self.method.seconds.observe(time.perf_counter() - self.start)
        if self.span is not None:
            self.span.set_attribute("rpc.grpc.status_code", code.value[0])
            if code is not grpc.StatusCode.OK:
                self.span.set_status(trace.StatusCode.ERROR, GO_CODE_NAMES.get(code, "Unknown"))
            if error is not None and not isinstance(error, _ENDINGS):
                self.span.record_exception(error)
            self.span.end()
            tracing.reset(self.token)


_AbortError: type[BaseException] = getattr(grpc.aio, "AbortError", Exception)
# How a call ends without an error worth recording on its span.
_ENDINGS = (asyncio.CancelledError, GeneratorExit, _AbortError)


def _code_after(context: grpc.aio.ServicerContext, error: BaseException | None) -> grpc.StatusCode:
    # GeneratorExit: the stream was closed from outside before it ended.
    if isinstance(error, asyncio.CancelledError | GeneratorExit):
        return grpc.StatusCode.CANCELLED
    code = context.code()
    if isinstance(code, grpc.StatusCode):
        return code
    if error is not None and not isinstance(error, _AbortError):
        return grpc.StatusCode.UNKNOWN
    return grpc.StatusCode.OK


class _CountingContext:
    """Lets a handler that streams with ``context.write`` be counted."""

    def __init__(self, context: grpc.aio.ServicerContext, call: _Call) -> None:
        self._context = context
        self._call = call

    async def write(self, message: Any) -> None:
        await self._context.write(message)
        self._call.sent()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._context, name)


class TelemetryInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    def __init__(self, metrics: ServerMetrics | None, tracer: trace.Tracer | None) -> None:
        self.metrics = metrics
        self.tracer = tracer
        self._methods: dict[str, _Method] = {}

    def _method(self, handler: grpc.RpcMethodHandler, full_name: str) -> _Method | None:
        if self.metrics is None:
            return None
        known = self._methods.get(full_name)
        if known is None:
            service, _, name = full_name.lstrip("/").partition("/")
            labels = (rpc_type(handler), service, name)
            known = self._methods[full_name] = _Method(self.metrics, labels)
        return known

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        if handler is None:
            return None  # not a registered method: grpc answers UNIMPLEMENTED, unmeasured
        method = self._method(handler, details.method)
        tracer = self.tracer

        def begin() -> _Call:
            return _Call(method, tracer, details)

        return _wrap(handler, begin)


def _wrap(handler: grpc.RpcMethodHandler, begin: Callable[[], _Call]) -> grpc.RpcMethodHandler:
    kw = {
        "request_deserializer": handler.request_deserializer,
        "response_serializer": handler.response_serializer,
    }
    if handler.unary_unary:
        return grpc.unary_unary_rpc_method_handler(_unary(handler.unary_unary, begin), **kw)
    if handler.unary_stream:
        return grpc.unary_stream_rpc_method_handler(
            _streaming(handler.unary_stream, begin, request_streaming=False), **kw
        )
    if handler.stream_unary:
        return grpc.stream_unary_rpc_method_handler(
            _unary(handler.stream_unary, begin, request_streaming=True), **kw
        )
    return grpc.stream_stream_rpc_method_handler(
        _streaming(handler.stream_stream, begin, request_streaming=True), **kw
    )


async def _counted(requests: AsyncIterator[Any], call: _Call) -> AsyncIterator[Any]:
    async for request in requests:
        call.received()
        yield request


def _unary(
    behavior: Behavior,
    begin: Callable[[], _Call],
    request_streaming: bool = False,
) -> Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]]:
    async def handle(request: Any, context: grpc.aio.ServicerContext) -> Any:
        call = begin()
        if request_streaming:
            request = requests_for(behavior, _counted(request, call))
        else:
            call.received()
        try:
            response = await unary_response(behavior, request, context)
        except BaseException as exc:
            call.end(_code_after(context, exc), exc)
            raise
        call.sent()
        call.end(_code_after(context, None))
        return response

    return handle


def _streaming(
    behavior: Behavior, begin: Callable[[], _Call], *, request_streaming: bool
) -> Callable[[Any, grpc.aio.ServicerContext], AsyncIterator[Any]]:
    # One wrapper for every shape: a coroutine's own context.write calls are
    # counted by the context it is given, the rest as they are yielded.
    async def stream(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        call = begin()
        if request_streaming:
            request = requests_for(behavior, _counted(request, call))
        else:
            call.received()
        error: BaseException | None = None
        responses = stream_responses(behavior, request, _CountingContext(context, call))
        del request  # not held for the call (transport/grpc/released_request.py)
        try:
            async for response in responses:
                call.sent()
                yield response
        except BaseException as exc:
            error = exc
            raise
        finally:
            call.end(_code_after(context, error), error)

    return stream
