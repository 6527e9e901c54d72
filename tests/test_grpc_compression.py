"""Compressed request messages on the gRPC port (#40 item 1).

grpcio inflates a compressed message whole, on the event loop's thread,
before it checks the message limit, so a gzip bomb held every client of the
process. The port refuses compressed requests unless
``compressed_requests`` (``serve --grpc-compressed-requests``) is on.
"""

from __future__ import annotations

import grpc
import pytest
from conftest import ServerFactory

from omni_grpc_proto.omni.v1 import agent_service_pb2

LIST_SESSIONS = "/omni.v1.AgentService/ListSessions"
MiB = 1 << 20


def bomb(size: int) -> bytes:
    """A ListSessionsRequest carrying ``size`` zero bytes in field 15, which
    it does not know: only its size matters, and zeros compress ~1000:1."""
    head = bytes([15 << 3 | 2])
    n = size
    while True:
        head += bytes([(n & 0x7F) | (0x80 if n > 0x7F else 0)])
        n >>= 7
        if not n:
            break
    return head + b"\0" * size


async def list_sessions(target: str, body: bytes, compression: grpc.Compression) -> bytes:
    options = [("grpc.max_send_message_length", -1)]
    async with grpc.aio.insecure_channel(target, options=options, compression=compression) as ch:
        call = ch.unary_unary(
            LIST_SESSIONS, request_serializer=lambda b: b, response_deserializer=lambda b: b
        )
        response: bytes = await call(body, timeout=60)
        return response


async def test_compressed_requests_are_refused_before_they_are_inflated(
    server_factory: ServerFactory,
) -> None:
    server = await server_factory(max_message_bytes=4 * MiB)
    assert server.grpc is not None
    target = server.grpc.address
    empty = agent_service_pb2.ListSessionsRequest().SerializeToString()
    # Uncompressed requests are served as ever.
    await list_sessions(target, empty, grpc.Compression.NoCompression)
    for body in (empty, bomb(64 * MiB)):
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await list_sessions(target, body, grpc.Compression.Gzip)
        # Refused for its compression, not for its size: a bomb past the
        # limit (4 MiB) would be RESOURCE_EXHAUSTED had it been inflated.
        assert refused.value.code() == grpc.StatusCode.UNIMPLEMENTED, refused.value
        assert "gzip" in (refused.value.details() or "").lower(), refused.value.details()


async def test_compressed_requests_are_served_when_turned_on(
    server_factory: ServerFactory,
) -> None:
    server = await server_factory(max_message_bytes=4 * MiB, compressed_requests=True)
    assert server.grpc is not None
    target = server.grpc.address
    empty = agent_service_pb2.ListSessionsRequest().SerializeToString()
    await list_sessions(target, empty, grpc.Compression.Gzip)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await list_sessions(target, bomb(64 * MiB), grpc.Compression.Gzip)
    # Inflated, then refused past the limit: what the default avoids.
    assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, refused.value
