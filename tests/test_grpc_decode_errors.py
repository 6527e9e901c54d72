"""Requests that do not decode are INVALID_ARGUMENT, never UNKNOWN, and no
status detail names a file on the server."""

from __future__ import annotations

import re

import grpc
import pytest
from conftest import ServerFactory
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from omni_grpc.transport.grpc.decoding import without_paths

SERVICE = "/omni.v1.AgentService/"
UNARY = ("Approve", "Abort", "ListSessions")
STREAMING = ("Run", "Attach", "GetHistory")
ABSOLUTE_PATH = re.compile(r"(^|[\s'\"(])/[\w.-]+/")


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def deep_struct(depth: int) -> bytes:
    """A google.protobuf.Struct nested ``depth`` levels: {"a": {"a": ...}}."""
    struct = b""
    for _ in range(depth):
        value = _field(5, struct)  # Value.struct_value
        entry = _field(1, b"a") + _field(2, value)
        struct = _field(1, entry)  # Struct.fields
    return struct


async def call(target: str, method: str, data: bytes) -> grpc.aio.AioRpcError | None:
    async with grpc.aio.insecure_channel(target) as channel:
        try:
            if method in UNARY:
                await channel.unary_unary(SERVICE + method)(data, timeout=10)
            else:
                async for _ in channel.unary_stream(SERVICE + method)(data, timeout=10):
                    break
        except grpc.aio.AioRpcError as exc:
            return exc
    return None


# A string field of each request (all of them are field 1 but Run's prompt).
STRING_FIELD = {"Run": 3, "Attach": 1, "Approve": 1, "Abort": 1, "GetHistory": 1}


def bad_requests(method: str) -> dict[str, bytes]:
    cases = {
        "garbage": b"\xff\xff\xff\xff\xff",
        "truncated": _field(1, b"hello")[:-2],
    }
    if method in STRING_FIELD:
        cases["invalid utf-8"] = _field(STRING_FIELD[method], b"caf\xc3")
    if method == "Run":
        cases["200-deep metadata"] = _field(3, b"hi") + _field(6, deep_struct(200))
    return cases


CASES = [(m, c) for m in UNARY + STREAMING for c in bad_requests(m)]


@pytest.mark.parametrize(("method", "case"), CASES)
async def test_undecodable_requests_are_invalid_argument(
    grpc_target: str, method: str, case: str
) -> None:
    error = await call(grpc_target, method, bad_requests(method)[case])
    assert error is not None
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()
    assert "Unexpected" not in (error.details() or "")
    assert not ABSOLUTE_PATH.search(error.details() or "")


async def test_undecodable_requests_are_refused_after_auth(server_factory: ServerFactory) -> None:
    server = await server_factory(auth_token="t0ken")
    assert server.grpc is not None
    error = await call(server.grpc.address, "Run", bad_requests("Run")["garbage"])
    assert error is not None and error.code() == grpc.StatusCode.UNAUTHENTICATED


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.binary(min_size=1, max_size=64), method=st.sampled_from(("Attach", "Approve")))
async def test_no_bytes_give_unknown_or_internal(
    grpc_target: str, data: bytes, method: str
) -> None:
    error = await call(grpc_target, method, data)
    if error is not None:
        assert error.code() not in (grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL), (
            error.details()
        )
        assert not ABSOLUTE_PATH.search(error.details() or "")


def test_paths_are_cut_from_texts() -> None:
    assert without_paths("[Errno 2] No such file: '/srv/data/x_001.jsonl'") == (
        "[Errno 2] No such file: '<path>'"
    )
    assert without_paths("must match [A-Za-z0-9_-]{1,128}") == "must match [A-Za-z0-9_-]{1,128}"
    assert without_paths("see https://example.com/a/b") == "see https://example.com/a/b"
