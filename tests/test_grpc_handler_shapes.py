"""Every behavior shape grpc.aio takes, through the server's own interceptor
chain (telemetry, auth, decode guard), from a real grpcio client.

grpcio-health's ``Watch`` is a coroutine that sends with ``context.write``;
an interceptor that iterated it with ``async for`` failed every call with
INTERNAL. Here each shape (unary and streaming responses, as a coroutine, an
async generator or a plain function, with unary or streamed requests) answers
exactly what it answers with no interceptor at all, is counted by the metrics,
and an exception in any of them is INTERNAL with a fixed text.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
import pytest
from prometheus_client import CollectorRegistry

from omni_grpc.observability.grpc_server import TelemetryInterceptor
from omni_grpc.observability.metrics import ServerMetrics
from omni_grpc.transport.grpc.decoding import INTERNAL_MESSAGE
from omni_grpc.transport.grpc.server import interceptor_chain

TOKEN = "shape-token"
SERVICE = "shapes.v1.Shapes"


class Boom(RuntimeError):
    """An error whose name and text must never reach a client."""


def _maybe_fail(request: bytes) -> None:
    if request == b"fail":
        raise Boom("/srv/secret/path went wrong")


# ---- unary responses -------------------------------------------------------------


async def coroutine_unary(request: bytes, context: Any) -> bytes:
    _maybe_fail(request)
    return b"cu:" + request


def sync_unary(request: bytes, context: Any) -> bytes:
    _maybe_fail(request)
    return b"su:" + request


async def coroutine_client_stream(requests: AsyncIterator[bytes], context: Any) -> bytes:
    got = [r async for r in requests]
    _maybe_fail(got[-1])
    return b"|".join(got)


def sync_client_stream(requests: Iterator[bytes], context: Any) -> bytes:
    got = list(requests)
    _maybe_fail(got[-1])
    return b"|".join(got)


# ---- streamed responses ----------------------------------------------------------


async def asyncgen_stream(request: bytes, context: Any) -> AsyncIterator[bytes]:
    for i in range(3):
        yield b"ag%d" % i
    _maybe_fail(request)


async def coroutine_stream(request: bytes, context: Any) -> None:
    # The shape of grpcio-health's Watch.
    for i in range(3):
        await context.write(b"cw%d" % i)
    _maybe_fail(request)


def sync_stream(request: bytes, context: Any) -> Iterator[bytes]:
    for i in range(3):
        yield b"sg%d" % i
    _maybe_fail(request)


async def asyncgen_bidi(requests: AsyncIterator[bytes], context: Any) -> AsyncIterator[bytes]:
    async for request in requests:
        _maybe_fail(request)
        yield b"ab:" + request


async def coroutine_bidi(requests: AsyncIterator[bytes], context: Any) -> None:
    async for request in requests:
        _maybe_fail(request)
        await context.write(b"cb:" + request)


def sync_bidi(requests: Iterator[bytes], context: Any) -> Iterator[bytes]:
    for request in requests:
        _maybe_fail(request)
        yield b"sb:" + request


UNARY = {"CoroutineUnary": coroutine_unary, "SyncUnary": sync_unary}
CLIENT_STREAM = {
    "CoroutineClientStream": coroutine_client_stream,
    "SyncClientStream": sync_client_stream,
}
SERVER_STREAM = {
    "AsyncGenStream": asyncgen_stream,
    "CoroutineStream": coroutine_stream,
    "SyncStream": sync_stream,
}
BIDI = {"AsyncGenBidi": asyncgen_bidi, "CoroutineBidi": coroutine_bidi, "SyncBidi": sync_bidi}


def _handlers() -> grpc.GenericRpcHandler:
    table: dict[str, grpc.RpcMethodHandler] = {}
    for name, fn in UNARY.items():
        table[name] = grpc.unary_unary_rpc_method_handler(fn)
    for name, fn in CLIENT_STREAM.items():
        table[name] = grpc.stream_unary_rpc_method_handler(fn)
    for name, fn in SERVER_STREAM.items():
        table[name] = grpc.unary_stream_rpc_method_handler(fn)
    for name, fn in BIDI.items():
        table[name] = grpc.stream_stream_rpc_method_handler(fn)
    return grpc.method_handlers_generic_handler(SERVICE, table)


async def _serve(interceptors: list[grpc.aio.ServerInterceptor]) -> tuple[grpc.aio.Server, str]:
    server = grpc.aio.server(interceptors=interceptors)
    server.add_generic_rpc_handlers([_handlers()])
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, f"127.0.0.1:{port}"


async def _answers(channel: grpc.aio.Channel, method: str, request: bytes) -> Any:
    """What one call answers: its response(s), or its status code and details."""
    path = f"/{SERVICE}/{method}"
    metadata = (("authorization", f"Bearer {TOKEN}"),)
    try:
        if method in UNARY:
            return await channel.unary_unary(path)(request, metadata=metadata)
        if method in CLIENT_STREAM:
            return await channel.stream_unary(path)(iter([b"a", request]), metadata=metadata)
        if method in SERVER_STREAM:
            call = channel.unary_stream(path)(request, metadata=metadata)
        else:
            call = channel.stream_stream(path)(iter([b"a", request]), metadata=metadata)
        return [r async for r in call]
    except grpc.aio.AioRpcError as exc:
        return (exc.code(), exc.details())


ALL = [*UNARY, *CLIENT_STREAM, *SERVER_STREAM, *BIDI]


@pytest.fixture
async def servers() -> AsyncIterator[tuple[str, str, ServerMetrics]]:
    """A bare server and one behind the production chain (with metrics)."""
    metrics = ServerMetrics(CollectorRegistry(), process=False)
    bare, bare_addr = await _serve([])
    chain = interceptor_chain([TelemetryInterceptor(metrics, None)], TOKEN)
    guarded, guarded_addr = await _serve(chain)
    try:
        yield bare_addr, guarded_addr, metrics
    finally:
        await guarded.stop(None)
        await bare.stop(None)


@pytest.mark.parametrize("method", ALL)
async def test_every_shape_answers_through_the_chain_what_it_answers_bare(
    servers: tuple[str, str, ServerMetrics], method: str
) -> None:
    bare_addr, guarded_addr, metrics = servers
    async with (
        grpc.aio.insecure_channel(bare_addr) as bare,
        grpc.aio.insecure_channel(guarded_addr) as guarded,
    ):
        expected = await _answers(bare, method, b"ok")
        assert not isinstance(expected, tuple), expected  # the shape works bare
        assert await _answers(guarded, method, b"ok") == expected
    sent = metrics.registry.get_sample_value(
        "grpc_server_msg_sent_total",
        {"grpc_type": _type(method), "grpc_service": SERVICE, "grpc_method": method},
    )
    assert sent == (len(expected) if isinstance(expected, list) else 1)
    handled = metrics.registry.get_sample_value(
        "grpc_server_handled_total",
        {
            "grpc_type": _type(method),
            "grpc_service": SERVICE,
            "grpc_method": method,
            "grpc_code": "OK",
        },
    )
    assert handled == 1


@pytest.mark.parametrize("method", [*UNARY, *SERVER_STREAM])
async def test_an_error_in_any_shape_is_internal_with_a_fixed_text(
    servers: tuple[str, str, ServerMetrics], method: str
) -> None:
    _, guarded_addr, _ = servers
    async with grpc.aio.insecure_channel(guarded_addr) as channel:
        path = f"/{SERVICE}/{method}"
        metadata = (("authorization", f"Bearer {TOKEN}"),)
        with pytest.raises(grpc.aio.AioRpcError) as failed:
            if method in UNARY:
                await channel.unary_unary(path)(b"fail", metadata=metadata)
            else:
                async for _ in channel.unary_stream(path)(b"fail", metadata=metadata):
                    pass
    assert failed.value.code() == grpc.StatusCode.INTERNAL
    details = failed.value.details() or ""
    assert details == INTERNAL_MESSAGE
    for leak in ("Boom", "RuntimeError", "TypeError", "secret", "/srv"):
        assert leak not in details


@pytest.mark.parametrize("method", ALL)
async def test_auth_refuses_every_shape(
    servers: tuple[str, str, ServerMetrics], method: str
) -> None:
    _, guarded_addr, _ = servers
    async with grpc.aio.insecure_channel(guarded_addr) as channel:
        path = f"/{SERVICE}/{method}"
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            if method in UNARY:
                await channel.unary_unary(path)(b"x")
            elif method in CLIENT_STREAM:
                await channel.stream_unary(path)(iter([b"x"]))
            elif method in SERVER_STREAM:
                await asyncio.wait_for(_drain(channel.unary_stream(path)(b"x")), 30)
            else:
                await asyncio.wait_for(_drain(channel.stream_stream(path)(iter([b"x"]))), 30)
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED


async def _drain(call: Any) -> None:
    async for _ in call:
        pass


def _type(method: str) -> str:
    if method in UNARY:
        return "unary"
    if method in CLIENT_STREAM:
        return "client_stream"
    return "server_stream" if method in SERVER_STREAM else "bidi_stream"
