"""Unexpected Connect and gRPC-Web requests, answered as connectrpc/conformance's
server cases expect (``connect_server_unexpected.yaml``,
``grpc_web_server_unexpected.yaml``) and connect-go answers them, against a
real server: message counts, compressions, compressed flags, gzip bodies
that are not one whole member, and gzip bombs. None of them records
anything."""

from __future__ import annotations

import base64
import gzip
import json
import struct
from pathlib import Path

import httpx
from connect_serving import Served, serving

from omni_grpc.client import AgentClient
from omni_grpc_proto.omni.v1 import agent_service_pb2 as pb

LIMIT = 64 * 1024  # the server's --max-message-bytes in these tests
RUN = pb.RunRequest(prompt="hi").SerializeToString()
LIST = pb.ListSessionsRequest().SerializeToString()


def envelope(data: bytes, flags: int = 0) -> bytes:
    return struct.pack(">BI", flags, len(data)) + data


def gz(data: bytes) -> bytes:
    return gzip.compress(data, mtime=0)


def connect_end(body: bytes) -> dict[str, str]:
    """The error of a Connect stream's end-of-stream message (its only frame)."""
    flags, length = struct.unpack_from(">BI", body)
    assert flags == 0x02 and len(body) == 5 + length, body
    return dict(json.loads(body[5:])["error"])


async def connect_stream(
    http: httpx.AsyncClient, served: Served, body: bytes, method: str = "Run", **headers: str
) -> tuple[httpx.Response, dict[str, str]]:
    r = await http.post(
        served.url(method),
        content=body,
        headers={"content-type": "application/connect+proto", **_dashed(headers)},
    )
    assert r.status_code == 200, r.text
    return r, connect_end(r.content)


async def grpc_web(
    http: httpx.AsyncClient, served: Served, method: str, body: bytes, text: bool, **headers: str
) -> httpx.Response:
    kind = "application/grpc-web-text" if text else "application/grpc-web+proto"
    r = await http.post(
        served.url(method),
        content=base64.b64encode(body) if text else body,
        headers={"content-type": kind, **_dashed(headers)},
    )
    assert r.status_code == 200, r.text
    return r


def _dashed(headers: dict[str, str]) -> dict[str, str]:
    return {k.replace("_", "-"): v for k, v in headers.items()}


async def nothing_recorded(served: Served) -> None:
    async with AgentClient(served.grpc_target) as client:
        assert await client.list_sessions() == []


async def test_message_counts_are_unimplemented(tmp_path: Path) -> None:
    """no-request and multiple-requests, unary and server-stream, on both protocols."""
    async with (
        serving(tmp_path / "data", max_message_bytes=LIMIT) as served,
        httpx.AsyncClient() as http,
    ):
        for body, why in ((b"", "empty"), (envelope(RUN) * 2, "more than one message")):
            _, error = await connect_stream(http, served, body)
            assert error["code"] == "unimplemented" and why in error["message"], error
            for method, one in (("Run", RUN), ("ListSessions", LIST)):
                for text in (False, True):
                    sent = body if body else b""
                    if body:
                        sent = envelope(one) * 2
                    r = await grpc_web(http, served, method, sent, text)
                    assert r.headers["grpc-status"] == "12", (method, text, r.headers)
                    assert why in r.headers["grpc-message"]
        # A second envelope is refused as soon as its header is in: a large
        # second message is never read.
        _, error = await connect_stream(
            http, served, envelope(RUN) + envelope(b"\0" * (LIMIT - 10))
        )
        assert error["code"] == "unimplemented"
        await nothing_recorded(served)


async def test_a_compressed_flag_without_a_compression_is_internal(tmp_path: Path) -> None:
    """unexpected-compressed-message: flag 0x01 with identity (named or implied)."""
    async with (
        serving(tmp_path / "data", max_message_bytes=LIMIT) as served,
        httpx.AsyncClient() as http,
    ):
        for named in ({"connect_content_encoding": "identity"}, {}):
            _, error = await connect_stream(http, served, envelope(gz(RUN), flags=1), **named)
            assert error["code"] == "internal" and "flagged compressed" in error["message"]
        for named in ({"grpc_encoding": "identity"}, {}):
            for text in (False, True):
                r = await grpc_web(
                    http, served, "ListSessions", envelope(gz(LIST), flags=1), text, **named
                )
                assert r.headers["grpc-status"] == "13", r.headers
        await nothing_recorded(served)


async def test_an_unknown_compression_is_unimplemented_even_on_plain_messages(
    tmp_path: Path,
) -> None:
    """unexpected-compression, and the accept-encoding headers that name gzip."""
    async with (
        serving(tmp_path / "data", max_message_bytes=LIMIT) as served,
        httpx.AsyncClient() as http,
    ):
        r, error = await connect_stream(
            http, served, envelope(RUN), connect_content_encoding="zstd"
        )
        assert error["code"] == "unimplemented" and "'zstd'" in error["message"]
        assert "gzip" in error["message"] and r.headers["connect-accept-encoding"] == "gzip"
        for text in (False, True):
            r = await grpc_web(
                http, served, "ListSessions", envelope(LIST), text, grpc_encoding="foo"
            )
            assert r.headers["grpc-status"] == "12" and "'foo'" in r.headers["grpc-message"]
            assert r.headers["grpc-accept-encoding"] == "gzip"
        unary = await http.post(
            served.url("ListSessions"),
            content=b"{}",
            headers={"content-type": "application/json", "content-encoding": "foo"},
        )
        assert unary.status_code == 501 and unary.json()["code"] == "unimplemented"
        assert unary.headers["accept-encoding"] == "gzip"
        # Answers that went well name them too.
        ok = await http.post(
            served.url("ListSessions"), content=b"{}", headers={"content-type": "application/json"}
        )
        assert ok.status_code == 200 and ok.headers["accept-encoding"] == "gzip"
        ok = await grpc_web(http, served, "ListSessions", envelope(LIST), False)
        assert ok.headers["grpc-accept-encoding"] == "gzip"
        await nothing_recorded(served)


def _broken_gzip_bodies(data: bytes) -> list[tuple[bytes, str]]:
    """Bodies that are not one whole member, each with the reason its refusal
    names. Every one ends with 4 bytes that declare a size within the limit:
    a gzip body is first judged by its trailer's size (a body whose last 4
    bytes declare more than the limit is refused at once, as too large)."""
    size = struct.pack("<I", len(data))
    # Stored (level 0), the payload's own last 4 bytes declare its length.
    stored = gzip.compress(data + struct.pack("<I", len(data) + 4), compresslevel=0, mtime=0)
    return [
        (stored[:-8], "cut short"),  # no CRC/length trailer: the payload's last bytes end it
        (gz(data) + size, "4 bytes after its trailer"),
        (gz(data) + gz(bytes(reversed(data))), "second gzip member"),
        (gz(data)[:-8] + b"\0\0\0\0" + size, "incorrect data check"),
        (gz(data)[:-4] + struct.pack("<I", len(data) // 4), "inflates past"),
    ]


async def test_gzip_bodies_that_are_not_one_whole_member_are_refused(tmp_path: Path) -> None:
    async with (
        serving(tmp_path / "data", max_message_bytes=LIMIT) as served,
        httpx.AsyncClient() as http,
    ):
        prompt = pb.RunRequest(prompt="a prompt of some length " * 20).SerializeToString()
        for body, why in _broken_gzip_bodies(prompt):
            _, error = await connect_stream(
                http, served, envelope(body, flags=1), connect_content_encoding="gzip"
            )
            assert error["code"] == "invalid_argument" and why in error["message"], (why, error)
            r = await grpc_web(
                http, served, "Run", envelope(body, flags=1), True, grpc_encoding="gzip"
            )
            assert r.headers["grpc-status"] == "3" and why in r.headers["grpc-message"], why
        abort = b'{"sessionId": "nope", "reason": "a reason of some length"}'
        for body, why in _broken_gzip_bodies(abort):
            unary = await http.post(
                served.url("Abort"),
                content=body,
                headers={"content-type": "application/json", "content-encoding": "gzip"},
            )
            assert unary.status_code == 400 and why in unary.json()["message"], (why, unary.text)
        # Cut anywhere else, it is refused all the same.
        whole = gz(prompt)
        for cut in range(0, len(whole), 7):
            _, error = await connect_stream(
                http, served, envelope(whole[:cut], flags=1), connect_content_encoding="gzip"
            )
            declares_too_much = cut >= 18 and struct.unpack("<I", whole[cut - 4 : cut])[0] > LIMIT
            expected = "resource_exhausted" if declares_too_much else "invalid_argument"
            assert error["code"] == expected, (cut, error)
        # One whole member is read: the call gets as far as the session.
        attach = pb.AttachRequest(session_id="nope").SerializeToString()
        _, error = await connect_stream(
            http, served, envelope(gz(attach), flags=1), "Attach", connect_content_encoding="gzip"
        )
        assert error["code"] == "not_found" and "nope" in error["message"], error
        await nothing_recorded(served)


async def test_gzip_bombs_are_refused_at_the_limit(tmp_path: Path) -> None:
    """A bomb whose trailer is true is refused before inflating; one whose
    trailer lies, as soon as it inflates past what it declares (the bounds
    themselves: tests/test_connect_inflate.py)."""
    async with (
        serving(tmp_path / "data", max_message_bytes=LIMIT) as served,
        httpx.AsyncClient() as http,
    ):
        bomb = gz(pb.RunRequest(prompt="a" * (100 * LIMIT)).SerializeToString())
        lying = bomb[:-4] + struct.pack("<I", LIMIT // 2)
        assert len(bomb) < LIMIT // 4
        for body, why in ((bomb, "declares"), (lying, "inflates past")):
            _, error = await connect_stream(
                http, served, envelope(body, flags=1), connect_content_encoding="gzip"
            )
            expected = "resource_exhausted" if why == "declares" else "invalid_argument"
            assert error["code"] == expected and why in error["message"], error
            for text in (False, True):
                r = await grpc_web(
                    http, served, "Run", envelope(body, flags=1), text, grpc_encoding="gzip"
                )
                assert why in r.headers["grpc-message"], r.headers
            unary = await http.post(
                served.url("ListSessions"),
                content=body,
                headers={"content-type": "application/proto", "content-encoding": "gzip"},
            )
            assert why in unary.json()["message"], unary.text
        # A message just within the limit is read, gzip or not.
        fits = pb.AttachRequest(session_id="s" * (LIMIT - 16)).SerializeToString()
        assert len(fits) <= LIMIT
        _, error = await connect_stream(
            http, served, envelope(gz(fits), flags=1), "Attach", connect_content_encoding="gzip"
        )
        # It was inflated and read: the runtime's own check of the id answers.
        assert error["code"] == "invalid_argument" and "session_id: must" in error["message"]
        await nothing_recorded(served)
