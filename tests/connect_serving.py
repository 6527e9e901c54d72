"""A real server with gRPC and HTTP (so Connect and gRPC-Web) on loopback
ports the OS picks, for the Connect and gRPC-Web tests."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from omni_grpc.runtime.approvals import ApprovalMode
from omni_grpc.runtime.limits import Limits
from omni_grpc.server import OmniServer, ServerConfig, build_server
from omni_grpc.transport.grpc import GrpcConfig
from omni_grpc.transport.sse.transport import SseConfig

ROOT = Path(__file__).resolve().parents[1]
BUF = ROOT / "tools" / "node_modules" / ".bin" / "buf"
PROTO = ROOT / "proto"
SERVICE = "omni.v1.AgentService"


@dataclass
class Served:
    server: OmniServer
    grpc_target: str
    base_url: str  # http://127.0.0.1:PORT (https:// with tls)

    def url(self, method: str) -> str:
        return f"{self.base_url}/{SERVICE}/{method}"


@contextlib.asynccontextmanager
async def serving(
    data_dir: Path,
    *,
    token: str | None = None,
    cors_origins: Sequence[str] = (),
    approval_mode: ApprovalMode = ApprovalMode.ALLOW_ALL,
    client_modes: tuple[ApprovalMode, ...] | None = None,
    max_message_bytes: int = 16 * 1024 * 1024,
    limits: Limits | None = None,
    engine: str = "demo",
    engine_options: dict[str, str] | None = None,
    buffer_events: int = 10_000,
    tls: Path | None = None,
) -> AsyncIterator[Served]:
    """``tls``: a ``certs`` directory; the HTTP port then serves HTTPS with its
    server.pem/server.key (HTTP/2 by ALPN)."""
    cert = key = None
    if tls is not None:
        cert, key = tls / "server.pem", tls / "server.key"
    config = ServerConfig(
        engine=engine,
        engine_options=engine_options or {},
        data_dir=data_dir,
        approval_mode=approval_mode,
        client_modes=client_modes,
        grpc=GrpcConfig(
            host="127.0.0.1", port=0, auth_token=token, max_message_bytes=max_message_bytes
        ),
        http=SseConfig(
            host="127.0.0.1",
            port=0,
            auth_token=token,
            cors_origins=cors_origins,
            tls_cert=cert,
            tls_key=key,
        ),
        shutdown_grace=1.0,
        buffer_events=buffer_events,
        limits=limits or Limits(),
    )
    server = build_server(config)
    await server.start()
    try:
        assert server.grpc is not None
        http = next(t for t in server.transports if hasattr(t, "url"))
        yield Served(server, server.grpc.address, http.url)
    finally:
        await server.stop()


def require_buf() -> None:
    if not BUF.exists():
        if os.environ.get("OMNI_REQUIRE_TOOLCHAINS") == "1":
            pytest.fail("buf missing: scripts/setup installs it (tools/)", pytrace=False)
        pytest.skip("buf missing: scripts/setup installs it (tools/)")


def json_documents(text: str) -> list[Any]:
    """Every JSON document in ``text`` (buf curl prints one per message)."""
    decoder, documents, at = json.JSONDecoder(), [], 0
    while text[at:].strip():
        document, at = decoder.raw_decode(text, len(text) - len(text[at:].lstrip()))
        documents.append(document)
    return documents


def buf_curl_command(
    protocol: str,
    url: str,
    data: object | None = None,
    headers: Sequence[str] = (),
    timeout: float | None = None,
) -> list[str]:
    cmd = [str(BUF), "curl", "--protocol", protocol, "--schema", str(PROTO)]
    if timeout is not None:
        # The call's deadline, which connect-go sends as connect-timeout-ms / grpc-timeout.
        cmd += ["--timeout", f"{timeout}s"]
    for header in headers:
        cmd += ["-H", header]
    if data is not None:
        cmd += ["-d", json.dumps(data)]
    return [*cmd, url]


def run_blocking(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)


@dataclass
class BufResult:
    returncode: int
    messages: list[Any]  # what it printed on stdout, one document per message
    error: dict[str, Any] | None  # the error it printed on stderr

    @property
    def code(self) -> str | None:
        return None if self.error is None else str(self.error["code"])


async def buf_curl(
    protocol: str,
    url: str,
    data: object | None = None,
    headers: Sequence[str] = (),
    timeout: float | None = None,
) -> BufResult:
    """Runs ``buf curl`` (without blocking the loop the server runs in)."""
    import asyncio

    require_buf()
    proc = await asyncio.create_subprocess_exec(
        *buf_curl_command(protocol, url, data, headers, timeout),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    async with asyncio.timeout(60):
        out, err = await proc.communicate()
    assert proc.returncode is not None
    errors = json_documents(err.decode()) if err.strip().startswith(b"{") else []
    if proc.returncode != 0 and not errors:
        raise AssertionError(f"buf curl failed without an RPC error: {err.decode()}")
    return BufResult(proc.returncode, json_documents(out.decode()), errors[0] if errors else None)
