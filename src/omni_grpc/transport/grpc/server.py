"""The grpc.aio server: AgentService, health, reflection, auth, TLS, limits."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import tempfile
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from omni_grpc.message_size import GRPC_MAX_MESSAGE_BYTES
from omni_grpc.runtime.errors import Unauthenticated
from omni_grpc.runtime.interface import BearerCheck, Runtime
from omni_grpc.transport.grpc import health
from omni_grpc.transport.grpc.decoding import DecodeGuardInterceptor
from omni_grpc.transport.grpc.reflection import enable_reflection
from omni_grpc.transport.grpc.released_request import ReleasedRequestInterceptor
from omni_grpc.transport.grpc.responses import add_to_server
from omni_grpc.transport.grpc.service import AgentService
from omni_grpc_proto.omni.v1 import agent_service_pb2

SERVICE_NAME = agent_service_pb2.DESCRIPTOR.services_by_name["AgentService"].full_name
# Adds another service (the A2A one) to the server; its full name, for reflection.
AddService = Callable[[grpc.aio.Server], str]


@dataclass
class GrpcConfig:
    host: str = "127.0.0.1"
    port: int = 50051
    auth_token: str | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    # Requiring client certificates signed by this CA (mTLS).
    tls_client_ca: Path | None = None
    max_message_bytes: int = GRPC_MAX_MESSAGE_BYTES
    keepalive_time_ms: int = 30_000
    keepalive_timeout_ms: int = 10_000
    # Open connections the listener accepts; grpcio refuses the rest before
    # their handshake, so they cost no descriptor for long.
    max_connections: int = 1000
    # A connection must finish its TLS and HTTP/2 handshake within this
    # (the gRPC side of the HTTP header timeout): half-open ones end.
    handshake_timeout_ms: int = 20_000
    # A connection with no call for this long gets GOAWAY (clients reconnect).
    idle_timeout_ms: int = 300_000
    # Compressed (gzip, deflate) request messages. grpcio inflates a message
    # whole, on the thread that runs the event loop, before it checks the
    # message limit: a 200 KB gzip bomb held every client of the process for
    # seconds (#40). Off, such a request is refused UNIMPLEMENTED before it is
    # inflated; responses are never compressed either way.
    compressed_requests: bool = False

    def channel_options(self) -> list[tuple[str, int]]:
        return [
            ("grpc.max_allowed_incoming_connections", self.max_connections),
            ("grpc.server_handshake_timeout_ms", self.handshake_timeout_ms),
            ("grpc.max_connection_idle_ms", self.idle_timeout_ms),
            ("grpc.max_send_message_length", self.max_message_bytes),
            ("grpc.max_receive_message_length", self.max_message_bytes),
            ("grpc.keepalive_time_ms", self.keepalive_time_ms),
            ("grpc.keepalive_timeout_ms", self.keepalive_timeout_ms),
            ("grpc.keepalive_permit_without_calls", 1),
            # Accept client pings as often as we send ours.
            ("grpc.http2.min_ping_interval_without_data_ms", min(self.keepalive_time_ms, 10_000)),
            ("grpc.http2.max_pings_without_data", 0),
            # grpcio shares ports (SO_REUSEPORT) by default on Linux, so a
            # second server on a taken port would bind silently and split the
            # sessions between two processes. A taken port must be an error.
            ("grpc.so_reuseport", 0),
            # Bit 0 is identity (always on), bit 1 deflate, bit 2 gzip.
            (
                "grpc.compression_enabled_algorithms_bitset",
                0b111 if self.compressed_requests else 0b001,
            ),
        ]


class GrpcTransport:
    """Owns one grpc.aio server bound to the hub."""

    def __init__(
        self,
        hub: Runtime,
        config: GrpcConfig,
        interceptors: Sequence[grpc.aio.ServerInterceptor] = (),
        services: Sequence[AddService] = (),
    ) -> None:
        self.hub = hub
        # Served beside AgentService, behind the same auth and guards.
        self.services = list(services)
        self.config = config
        # Run before auth (telemetry sees refused calls too).
        self.interceptors = list(interceptors)
        self.port = 0
        # Built now so bad TLS settings fail before anything starts.
        self._credentials = server_credentials(config)
        self.server: grpc.aio.Server | None = None
        self.health = health.HealthServicer()
        self._health_updates: set[asyncio.Task[None]] = set()
        self._stopping = False

    def _build(self) -> grpc.aio.Server:
        """A grpc.aio server belongs to the running loop, so it is made in start()."""
        server = grpc.aio.server(
            interceptors=interceptor_chain(self.interceptors, self.config.auth_token),
            options=self.config.channel_options(),
        )
        add_to_server(AgentService(self.hub), server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        others = [add(server) for add in self.services]
        names = (SERVICE_NAME, health.SERVICE_NAME, *others)
        enable_reflection(server, names, self.health.closing)
        return server

    @property
    def address(self) -> str:
        host = f"[{self.config.host}]" if ":" in self.config.host else self.config.host
        return f"{host}:{self.port}"

    @property
    def tls(self) -> bool:
        return self.config.tls_cert is not None

    def describe(self) -> str:
        return f"gRPC on {'grpcs' if self.tls else 'grpc'}://{self.address}"

    async def start(self) -> None:
        target = f"{self.config.host}:{self.config.port}"
        if ":" in self.config.host:
            target = f"[{self.config.host}]:{self.config.port}"
        self.server = server = self._build()
        failure: RuntimeError | None = None
        with _stderr_captured() as said:
            try:
                if self._credentials is None:
                    self.port = server.add_insecure_port(target)
                else:
                    self.port = server.add_secure_port(target, self._credentials)
            except RuntimeError as exc:  # grpcio reports a failed bind this way
                failure = exc
        if failure is not None or self.port == 0:
            raise OSError(f"cannot bind gRPC to {target}: {_why(said, failure)}") from failure
        # A bind that worked keeps whatever gRPC said on the way.
        for line in said:
            print(line, file=sys.stderr)
        await server.start()
        await self._set_health(self.hub.health.serving)
        self.hub.health.on_change(self._health_changed)

    async def _set_health(self, serving: bool) -> None:
        status = health_pb2.HealthCheckResponse.SERVING
        if not serving:
            status = health_pb2.HealthCheckResponse.NOT_SERVING
        for name in ("", SERVICE_NAME):
            await self.health.set(name, status)

    def _health_changed(self, serving: bool) -> None:
        if self._stopping:
            return  # graceful shutdown has set NOT_SERVING for good
        # The hub reports from inside a run: health.set is a coroutine.
        task = asyncio.get_running_loop().create_task(self._set_health(serving))
        self._health_updates.add(task)
        task.add_done_callback(self._health_updates.discard)

    async def end_streams(self) -> None:
        """The start of the shutdown's last phase: NOT_SERVING for good, and the
        calls that would never end on their own (Health.Watch, reflection)
        end now with UNAVAILABLE, so they hold neither the stop nor a log line."""
        self._stopping = True
        await self.health.close()

    async def stop(self, grace: float) -> None:
        await self.end_streams()
        if self.server is not None:
            await self.server.stop(grace)


# Load balancers and orchestrators probe health without credentials.
PUBLIC_PREFIXES = ("/grpc.health.v1.Health/",)


class BearerAuthInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Every RPC but health checks presents the token (the runtime's one
    ``BearerCheck``, as the HTTP transports ask it), else UNAUTHENTICATED."""

    def __init__(self, token: str) -> None:
        self._check = BearerCheck(token)

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        if handler is None or details.method.startswith(PUBLIC_PREFIXES):
            return handler
        try:
            self._check.check(_authorization(details.invocation_metadata))
        except Unauthenticated as exc:
            return _refusing(handler, exc.reason)
        return handler


def _authorization(metadata: Any) -> str | None:
    for key, value in metadata or ():
        if key == "authorization" and isinstance(value, str):
            return BearerCheck.credentials(value)
    return None


def _refusing(handler: grpc.RpcMethodHandler, reason: str) -> grpc.RpcMethodHandler:
    async def refuse(_request: Any, context: grpc.aio.ServicerContext) -> None:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, reason)

    kw = {
        "request_deserializer": handler.request_deserializer,
        "response_serializer": handler.response_serializer,
    }
    if handler.unary_unary:
        return grpc.unary_unary_rpc_method_handler(refuse, **kw)
    if handler.unary_stream:
        return grpc.unary_stream_rpc_method_handler(refuse, **kw)
    if handler.stream_unary:
        return grpc.stream_unary_rpc_method_handler(refuse, **kw)
    return grpc.stream_stream_rpc_method_handler(refuse, **kw)


def interceptor_chain(
    outer: Sequence[grpc.aio.ServerInterceptor], auth_token: str | None
) -> list[grpc.aio.ServerInterceptor]:
    """Run's request release (``released_request``) outermost, so every layer
    below sees Run as declared; then ``outer`` (telemetry), then auth, then
    the decode guard: auth sees the guarded handler, so a refused call never
    parses garbage."""
    chain: list[grpc.aio.ServerInterceptor] = [ReleasedRequestInterceptor(), *outer]
    if auth_token:
        chain.append(BearerAuthInterceptor(auth_token))
    chain.append(DecodeGuardInterceptor())
    return chain


@contextlib.contextmanager
def _stderr_captured() -> Iterator[list[str]]:
    """Collects what gRPC's C core writes to fd 2 meanwhile, as lines.

    A failed bind makes the core log its own ``E... Failed to add port`` line
    straight to the file descriptor, ahead of (and noisier than) the error the
    command reports; the caller decides where those words go.
    """
    said: list[str] = []
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no stderr to capture
        yield said
        return
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield said
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            said.extend(sink.read().decode("utf-8", errors="replace").splitlines())


def _why(said: list[str], exc: Exception | None) -> str:
    """gRPC's reason for a failed bind, from its log line when it wrote one."""
    for line in said:
        if "Failed to add port" in line:
            return line.split("] ", 1)[-1]
    return str(exc) if exc is not None else "no address could be bound"


def server_credentials(config: GrpcConfig) -> grpc.ServerCredentials | None:
    if config.tls_cert is None and config.tls_key is None:
        if config.tls_client_ca is not None:
            raise ValueError("--tls-client-ca needs --tls-cert and --tls-key")
        return None
    if config.tls_cert is None or config.tls_key is None:
        raise ValueError("--tls-cert and --tls-key go together")
    key, cert = config.tls_key.read_bytes(), config.tls_cert.read_bytes()
    client_ca = config.tls_client_ca.read_bytes() if config.tls_client_ca else None
    return grpc.ssl_server_credentials(
        [(key, cert)],
        root_certificates=client_ca,
        require_client_auth=client_ca is not None,
    )
