"""Run's request is let go once the handler has it (released_request.py).

grpc.aio keeps a unary-request call's request bytes and decoded request for
the whole call; for Run that was a prompt held twice over for as long as the
run streamed. Through the server's own chain (the release, telemetry, auth,
the decode guard), from a real grpcio client: a handler that drops its
request sees it collected while the call still streams, on every streaming
shape; the same chain without the release keeps it (so the check can fail);
refusals, decode errors and a client that leaves behave as before.
"""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import pytest
from google.protobuf.message import DecodeError
from prometheus_client import CollectorRegistry

from omni_grpc.observability.grpc_server import TelemetryInterceptor
from omni_grpc.observability.metrics import ServerMetrics
from omni_grpc.transport.grpc.decoding import DecodeGuardInterceptor
from omni_grpc.transport.grpc.released_request import METHODS
from omni_grpc.transport.grpc.server import BearerAuthInterceptor, interceptor_chain

TOKEN = "release-token"
[RUN] = METHODS
SERVICE, METHOD = RUN.strip("/").split("/")
AUTH = (("authorization", f"Bearer {TOKEN}"),)


class Request:
    """A decoded request that can be watched for collection."""

    def __init__(self, data: bytes) -> None:
        self.data = data


def parse(data: bytes) -> Request:
    if data == b"garbage":
        raise DecodeError("not a request")
    return Request(data)


def collected(ref: weakref.ref[Request]) -> bytes:
    gc.collect()
    return b"released" if ref() is None else b"held"


async def asyncgen_run(request: Request, context: Any) -> AsyncIterator[bytes]:
    ref = weakref.ref(request)
    del request
    yield collected(ref)
    yield b"more"


async def coroutine_run(request: Request, context: Any) -> None:
    ref = weakref.ref(request)
    del request
    await context.write(collected(ref))
    await context.write(b"more")


Behavior = Callable[[Request, Any], Any]


async def serve(
    behavior: Behavior, interceptors: list[grpc.aio.ServerInterceptor]
) -> tuple[grpc.aio.Server, str]:
    server = grpc.aio.server(interceptors=interceptors)
    handler = grpc.unary_stream_rpc_method_handler(behavior, request_deserializer=parse)
    server.add_generic_rpc_handlers(
        [grpc.method_handlers_generic_handler(SERVICE, {METHOD: handler})]
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, f"127.0.0.1:{port}"


def production() -> list[grpc.aio.ServerInterceptor]:
    metrics = ServerMetrics(CollectorRegistry(), process=False)
    return interceptor_chain([TelemetryInterceptor(metrics, None)], TOKEN)


def without_release() -> list[grpc.aio.ServerInterceptor]:
    metrics = ServerMetrics(CollectorRegistry(), process=False)
    return [
        TelemetryInterceptor(metrics, None),
        BearerAuthInterceptor(TOKEN),
        DecodeGuardInterceptor(),
    ]


async def answers(
    behavior: Behavior,
    chain: list[grpc.aio.ServerInterceptor],
    request: bytes = b"prompt",
    metadata: tuple[tuple[str, str], ...] = AUTH,
) -> list[bytes] | tuple[grpc.StatusCode, str]:
    server, address = await serve(behavior, chain)
    try:
        async with grpc.aio.insecure_channel(address) as channel:
            try:
                return [r async for r in channel.unary_stream(RUN)(request, metadata=metadata)]
            except grpc.aio.AioRpcError as exc:
                return exc.code(), exc.details() or ""
    finally:
        await server.stop(None)


@pytest.mark.parametrize("behavior", [asyncgen_run, coroutine_run])
async def test_the_request_is_collected_while_the_call_still_streams(behavior: Behavior) -> None:
    assert await answers(behavior, production()) == [b"released", b"more"]


@pytest.mark.parametrize("behavior", [asyncgen_run, coroutine_run])
async def test_without_the_release_grpc_keeps_the_request_for_the_call(behavior: Behavior) -> None:
    assert await answers(behavior, without_release()) == [b"held", b"more"]


async def test_an_undecodable_request_is_still_refused_naming_its_type() -> None:
    answer = await answers(asyncgen_run, production(), b"garbage")
    assert isinstance(answer, tuple)
    code, details = answer
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert details.startswith("the request is not a valid ")


async def test_a_call_without_a_token_is_still_refused() -> None:
    answer = await answers(asyncgen_run, production(), metadata=())
    assert answer == (grpc.StatusCode.UNAUTHENTICATED, "missing bearer token")


async def test_a_call_that_ends_without_its_request_is_told_so() -> None:
    server, address = await serve(asyncgen_run, production())
    try:
        async with grpc.aio.insecure_channel(address) as channel:
            call = channel.stream_stream(RUN)(iter(()), metadata=AUTH)
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                _ = [r async for r in call]
    finally:
        await server.stop(None)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "takes one request message" in (refused.value.details() or "")


async def test_a_client_that_leaves_ends_the_handler_at_once() -> None:
    """The handler's cleanup (AgentService.Run aborts a run its client left)
    runs when the client goes, not when the generator is collected."""
    started, cleaned = asyncio.Event(), asyncio.Event()

    async def waiting_run(request: Request, context: Any) -> AsyncIterator[bytes]:
        try:
            yield b"first"
            started.set()
            await asyncio.Event().wait()  # until the client leaves
            yield b"never"
        finally:
            cleaned.set()

    server, address = await serve(waiting_run, production())
    try:
        async with grpc.aio.insecure_channel(address) as channel:
            call = channel.unary_stream(RUN)(b"prompt", metadata=AUTH)
            assert await call.read() == b"first"
            await asyncio.wait_for(started.wait(), 30)
            call.cancel()
            await asyncio.wait_for(cleaned.wait(), 30)
    finally:
        await server.stop(None)
