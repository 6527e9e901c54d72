"""Shared fixtures: real servers on loopback, bound to ports the OS picks.

* ``server_factory(**overrides)`` starts an in-process ``OmniServer`` (engine,
  hub, gRPC on 127.0.0.1:0) in the test's event loop and stops it afterwards.
  Overrides: ``engine``, ``engine_options``, ``approval_mode``, ``client_modes``, ``data_dir``,
  ``buffer_events``,
  and any ``GrpcConfig`` field (``auth_token``, ``tls_cert``...).
* ``omni_server`` is one default server; ``grpc_target`` its ``host:port``.
* ``redis_server`` is one real ``redis-server`` for the whole session;
  ``make_backend(**kw)`` builds a backend of the kind the test is
  parametrized with (``backend_kind``: ``memory`` or ``redis``). The Redis
  backends of one test share a key prefix (so two hubs of one test are two
  replicas of one deployment) that no other test uses.
* ``certs`` is a directory with a throwaway CA (``ca.pem``) and server and
  client certificates and keys (``server.pem``/``.key``, ``client.pem``/``.key``).
* ``small_disk`` is a real 8 MiB tmpfs to fill (tests/small_disk.py).
* ``serve_process(*args)`` runs ``omni-grpc serve`` as a real subprocess and
  returns it with its gRPC address (parsed from its startup line).
"""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from redis_server import RedisServer
from small_disk import SmallDisk, mounted_small_disk

from omni_grpc.runtime import bodies
from omni_grpc.runtime.approvals import ApprovalMode
from omni_grpc.runtime.backend import Backend, memory_backend
from omni_grpc.runtime.event_log import EventLog, ReplayWindow
from omni_grpc.runtime.limits import Limits
from omni_grpc.runtime.memory_log import MemoryEventLog
from omni_grpc.server import OmniServer, ServerConfig, build_server
from omni_grpc.transport.grpc import GrpcConfig

# Properties assert what holds, not how fast: hypothesis's per-example deadline
# (200 ms) and its too-slow health check are timings, and on a loaded 2-core
# machine (CI beside its own servers) they fail tests whose properties hold.
# Speed is measured by benchmarks/, not here.
settings.register_profile("omni", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("omni")

ServerFactory = Callable[..., Awaitable[OmniServer]]


@pytest.fixture
async def server_factory(tmp_path: Path) -> AsyncIterator[ServerFactory]:
    servers: list[OmniServer] = []

    async def start(
        *,
        engine: str = "demo",
        engine_options: dict[str, str] | None = None,
        approval_mode: ApprovalMode = ApprovalMode.ALLOW_ALL,
        client_modes: tuple[ApprovalMode, ...] | None = None,
        data_dir: Path | None = None,
        buffer_events: int = 10_000,
        max_streams_per_session: int | None = None,
        **grpc_overrides: Any,
    ) -> OmniServer:
        grpc_config = GrpcConfig(host="127.0.0.1", port=0, **grpc_overrides)
        limits = Limits()
        if max_streams_per_session is not None:
            limits = Limits(max_streams_per_session=max_streams_per_session)
        config = ServerConfig(
            engine=engine,
            engine_options=engine_options or {},
            data_dir=data_dir or tmp_path / f"data{len(servers)}",
            approval_mode=approval_mode,
            client_modes=client_modes,
            grpc=grpc_config,
            shutdown_grace=1.0,
            buffer_events=buffer_events,
            limits=limits,
        )
        server = build_server(config)
        await server.start()
        servers.append(server)
        return server

    yield start
    for server in reversed(servers):
        await server.stop()


@pytest.fixture
async def omni_server(server_factory: ServerFactory) -> OmniServer:
    return await server_factory()


@pytest.fixture
def grpc_target(omni_server: OmniServer) -> str:
    assert omni_server.grpc is not None
    return omni_server.grpc.address


@dataclass
class ServeProcess:
    process: subprocess.Popen[str]
    grpc_address: str
    # "host:port" of the HTTP/SSE transport, None when it is off.
    http_address: str | None
    # The startup lines (one per transport, then "omni-grpc ready").
    banner: list[str]


_GRPC_LINE = re.compile(r"gRPC on grpcs?://(\S+)")
_HTTP_LINE = re.compile(r"HTTP\S* on https?://([^/\s]+)")


@pytest.fixture
def serve_process(tmp_path: Path) -> Iterator[Callable[..., ServeProcess]]:
    started: list[subprocess.Popen[str]] = []

    def start(*args: str, env: dict[str, str] | None = None) -> ServeProcess:
        cmd = [sys.executable, "-m", "omni_grpc", "serve", "--grpc-port", "0"]
        if "--data-dir" not in args:
            cmd += ["--data-dir", str(tmp_path / "serve-data")]
        if "--http-port" not in args and "--no-http" not in args:
            cmd += ["--http-port", "0"]
        proc = subprocess.Popen(
            [*cmd, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **(env or {})},
        )
        started.append(proc)
        assert proc.stdout is not None
        banner: list[str] = []
        for line in proc.stdout:
            banner.append(line)
            if line.strip() == "omni-grpc ready":
                text = "".join(banner)
                grpc_match, http_match = _GRPC_LINE.search(text), _HTTP_LINE.search(text)
                assert grpc_match is not None, text
                http = http_match.group(1) if http_match else None
                return ServeProcess(proc, grpc_match.group(1), http, banner)
        stderr = proc.stderr.read() if proc.stderr else ""
        raise AssertionError(f"serve exited ({proc.wait()}) without an address: {stderr}")

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[SmallDisk]:
    yield from mounted_small_disk(tmp_path)


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A redis-server of this test's own, for tests that stop, kill or fill it."""
    server = RedisServer(tmp_path / "redis")
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(params=["memory", "redis"])
def backend_kind(request: pytest.FixtureRequest) -> str:
    kind: str = request.param
    return kind


_prefixes = iter(range(1_000_000))


@pytest.fixture
async def make_backend(
    backend_kind: str, request: pytest.FixtureRequest
) -> AsyncIterator[Callable[..., Backend]]:
    made: list[Backend] = []
    test_prefix = f"t{os.getpid()}-{next(_prefixes)}:"

    def make(
        window: ReplayWindow | None = None, *, owner_loss_timeout: float = 12.0, prefix: str = ""
    ) -> Backend:
        if backend_kind == "memory":
            backend = memory_backend(window)
        else:
            from omni_grpc.runtime.redis import redis_backend

            server: RedisServer = request.getfixturevalue("redis_server")
            backend = redis_backend(
                server.url,
                window=window,
                owner_loss_timeout=owner_loss_timeout,
                prefix=prefix or test_prefix,
            )
        made.append(backend)
        return backend

    yield make
    for backend in made:
        await backend.aclose()


MakeLog = Callable[..., Awaitable[EventLog]]


@pytest.fixture
async def make_log(backend_kind: str, request: pytest.FixtureRequest) -> AsyncIterator[MakeLog]:
    """``make_log(epoch=None, max_count=..., max_bytes=...)`` on the backend
    this test runs with; each Redis log under a key prefix of its own."""
    logs: list[EventLog] = []
    conns = []

    handles: dict[int, tuple[str, int, int]] = {}  # id(log) -> its prefix and window

    async def make(
        *,
        epoch: str | None = None,
        max_count: int = 10_000,
        max_bytes: int = 8 << 20,
        replica_of: EventLog | None = None,
        stall_timeout: float = 0.05,
    ) -> EventLog:
        """``replica_of``: the same session's log as another replica sees it
        (on the memory backend, which has no replicas, that log itself)."""
        log: EventLog
        if replica_of is not None and backend_kind == "memory":
            return replica_of
        if backend_kind == "memory":
            # A reader that stops is let go quickly (the contract's cut-off cases).
            log = MemoryEventLog(
                bodies.resync_required_body(),
                epoch=epoch,
                max_count=max_count,
                max_bytes=max_bytes,
                stall_timeout=stall_timeout,
            )
        else:
            from omni_grpc.runtime.redis.connection import RedisConnection
            from omni_grpc.runtime.redis.event_log import RedisEventLog

            server = request.getfixturevalue("redis_server")
            prefix = f"log-{secrets.token_hex(6)}:"
            if replica_of is not None:
                prefix, max_count, max_bytes = handles[id(replica_of)]
            conn = RedisConnection(server.url, prefix=prefix)
            conns.append(conn)
            window = ReplayWindow(max_count, max_bytes)
            log = RedisEventLog(
                conn, "s1", window, idle_ttl=600, epoch=epoch, stall_timeout=stall_timeout
            )
            handles[id(log)] = (prefix, max_count, max_bytes)
        logs.append(log)
        return log

    yield make
    for log in logs:
        await log.close()
    for conn in conns:
        await conn.aclose()


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A throwaway CA, a server cert for 127.0.0.1 and a client cert, made here."""
    d = tmp_path_factory.mktemp("certs")
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "1",
            "-subj", "/CN=omni-grpc test CA", cwd=d)  # fmt: skip
    for name, ext in (
        ("server", "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth"),
        ("client", "extendedKeyUsage=clientAuth"),
    ):
        (d / f"{name}.ext").write_text(ext + "\n")
        openssl("req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr",
                "-subj", f"/CN={name}", cwd=d)  # fmt: skip
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                "-CAcreateserial", "-out", f"{name}.pem", "-days", "1",
                "-extfile", f"{name}.ext", cwd=d)  # fmt: skip
    return d
