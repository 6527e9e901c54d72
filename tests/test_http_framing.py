"""Ambiguous framing and duplicated security headers are refused (issue 29, item 8).

A request whose body length two headers tell differently (``Content-Length``
beside ``Transfer-Encoding``), or that names its ``Host``, ``Origin``,
``Content-Type`` or credentials twice, means different things to a proxy and
to this server. The guard used to keep the last ``Origin`` and skip the 415
check for ``Content-Length: 0`` plus a chunked ``text/plain`` body; now each
is a 400 that names the header, and nothing is created. The requests are
written byte for byte on a raw socket to a real uvicorn listener, since HTTP
clients refuse to send them.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from omni_grpc.engines.demo import DemoEngine
from omni_grpc.runtime.approvals import ApprovalMode
from omni_grpc.runtime.hub import Hub
from omni_grpc.transport.sse.app import create_app
from omni_grpc.transport.sse.guard import SINGLE_HEADERS
from omni_grpc.transport.sse.server import HttpServer


@asynccontextmanager
async def served(tmp_path: Path) -> AsyncIterator[tuple[Hub, int]]:
    hub = Hub(DemoEngine(), tmp_path / "data", default_approval=ApprovalMode.ALLOW_ALL)
    server = HttpServer(create_app(hub), port=0)
    await server.start()
    try:
        yield hub, server.port
    finally:
        await hub.shutdown()
        await server.stop()


async def exchange(port: int, head: list[str], body: bytes = b"") -> tuple[int, dict[str, str]]:
    """Sends one request exactly as written; the status and the JSON error."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        raw = "\r\n".join([*head, "Connection: close", "", ""]).encode("latin-1") + body
        writer.write(raw)
        await writer.drain()
        answer = await reader.read()
    finally:
        writer.close()
    status_line, _, rest = answer.partition(b"\r\n")
    status = int(status_line.split()[1])
    _, _, payload = rest.partition(b"\r\n\r\n")
    error = orjson.loads(payload).get("error", {}) if payload.startswith(b"{") else {}
    return status, error


CHUNKED_TEXT = b'e\r\n{"prompt":"x"}\r\n0\r\n\r\n'


async def test_content_length_beside_transfer_encoding_is_refused(tmp_path: Path) -> None:
    async with served(tmp_path) as (hub, port):
        for length in ("0", "14", "1000"):
            status, error = await exchange(
                port,
                [
                    "POST /v1/runs HTTP/1.1",
                    f"Host: 127.0.0.1:{port}",
                    "Content-Type: text/plain",
                    f"Content-Length: {length}",
                    "Transfer-Encoding: chunked",
                ],
                CHUNKED_TEXT,
            )
            assert status == 400, (length, status, error)
            assert error["code"] == "ambiguous_framing", error
            assert "Content-Length" in error["message"] and "Transfer-Encoding" in error["message"]
        # A chunked body alone still meets the 415 check.
        status, error = await exchange(
            port,
            [
                "POST /v1/runs HTTP/1.1",
                f"Host: 127.0.0.1:{port}",
                "Content-Type: text/plain",
                "Transfer-Encoding: chunked",
            ],
            CHUNKED_TEXT,
        )
        assert status == 415, (status, error)
        assert await hub.list_sessions() == []


async def test_two_origins_are_refused_whichever_comes_last(tmp_path: Path) -> None:
    async with served(tmp_path) as (hub, port):
        own = f"http://127.0.0.1:{port}"
        for first, last in ((f"{own}", "https://evil.example"), ("https://evil.example", own)):
            status, error = await exchange(
                port,
                [
                    "POST /api/sessions HTTP/1.1",
                    f"Host: 127.0.0.1:{port}",
                    f"Origin: {first}",
                    f"Origin: {last}",
                    "Content-Type: application/json",
                    "Content-Length: 2",
                ],
                b"{}",
            )
            assert status == 400, (first, last, status, error)
            assert error["code"] == "duplicate_header" and "Origin" in error["message"]
        assert await hub.list_sessions() == []
        # One Origin, the page's own, still creates a session.
        status, _ = await exchange(
            port,
            [
                "POST /api/sessions HTTP/1.1",
                f"Host: 127.0.0.1:{port}",
                f"Origin: {own}",
                "Content-Type: application/json",
                "Content-Length: 2",
            ],
            b"{}",
        )
        assert status == 201


HEADER_NAMES = sorted(SINGLE_HEADERS)


@pytest.fixture
async def port_and_hub(tmp_path: Path) -> AsyncIterator[tuple[Hub, int]]:
    async with served(tmp_path) as pair:
        yield pair


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    name=st.sampled_from(HEADER_NAMES),
    spelling=st.sampled_from(["lower", "title", "upper"]),
    values=st.lists(
        st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789/:.;=", min_size=0, max_size=20),
        min_size=2,
        max_size=3,
    ),
    method=st.sampled_from(["GET /api/sessions", "POST /api/sessions"]),
)
async def test_any_security_header_given_twice_is_refused(
    port_and_hub: tuple[Hub, int], name: str, spelling: str, values: list[str], method: str
) -> None:
    hub, port = port_and_hub
    spelled = {"lower": name, "title": name.title(), "upper": name.upper()}[spelling]
    head = [f"{method} HTTP/1.1"]
    if name != "host":
        head.append(f"Host: 127.0.0.1:{port}")
    head += [f"{spelled}: {value}" for value in values]
    status, error = await exchange(port, head)
    # h11 itself refuses some duplicates (two Content-Lengths that differ, two
    # Hosts) before the app sees them; the answer is a 400 either way.
    assert status == 400, (head, status, error)
    if error:
        assert error["code"] == "duplicate_header", error
    assert await hub.list_sessions() == []
