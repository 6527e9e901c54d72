"""The HTTP/SSE transport for the server bootstrap (``omni-grpc serve``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from omni_grpc.runtime.interface import DRAINING, Runtime
from omni_grpc.transport.sse.app import RequestTelemetry, create_app
from omni_grpc.transport.sse.guard import default_hosts
from omni_grpc.transport.sse.http_limits import HttpLimits
from omni_grpc.transport.sse.requests import DEFAULT_MAX_BODY_BYTES
from omni_grpc.transport.sse.server import HttpServer
from omni_grpc.transport.sse.wire import DEFAULT_HEARTBEAT_SECONDS


@dataclass
class SseConfig:
    host: str = "127.0.0.1"
    # 0 picks a free port.
    port: int = 8080
    # The same token gRPC requires; None serves without auth.
    auth_token: str | None = None
    cors_origins: Sequence[str] = field(default_factory=tuple)
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    heartbeat: float | None = DEFAULT_HEARTBEAT_SECONDS
    log_level: str = "warning"
    # The server's extra routes (GET /metrics) without the token.
    public_metrics: bool = False
    # Host names answered; empty: the loopback names and the bound address.
    allowed_hosts: Sequence[str] = field(default_factory=tuple)
    # Header, body and idle timeouts and the connection cap of the listener.
    limits: HttpLimits = field(default_factory=HttpLimits)
    # HTTPS on this port (the gRPC port's --tls-cert/--tls-key/--tls-client-ca).
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_client_ca: Path | None = None


class SseTransport:
    def __init__(
        self,
        hub: Runtime,
        config: SseConfig,
        telemetry: RequestTelemetry | None = None,
        extra_routes: Sequence[BaseRoute] = (),
        mounts: Sequence[tuple[str, ASGIApp]] = (),
        public_paths: Sequence[str] = (),
        own_media: Sequence[str] = (),
    ) -> None:
        """``extra_routes``: served beside the app's own (the server's ``/metrics``,
        the A2A routes); ``mounts``: ``(prefix, app)`` pairs, other ASGI apps on
        this port that answer every path under their prefix themselves (outside
        this app's middleware: they speak their own protocol's errors);
        ``public_paths``: the extra routes served without the token;
        ``own_media``: path prefixes whose routes refuse a non-JSON body
        themselves (``create_app``)."""
        self.config = config
        self.extra_paths = [r.path for r in extra_routes if isinstance(r, Route)]
        public = [*public_paths, *(self.extra_paths if config.public_metrics else ())]
        app: ASGIApp = create_app(
            hub,
            token=config.auth_token,
            cors_origins=config.cors_origins,
            max_body_bytes=config.max_body_bytes,
            heartbeat=config.heartbeat,
            telemetry=telemetry,
            extra_routes=extra_routes,
            public_paths=public,
            allowed_hosts=config.allowed_hosts or default_hosts(config.host),
            own_media=own_media,
        )
        if mounts:
            app = _Prefixed(app, mounts)
        self.server = HttpServer(
            app,
            host=config.host,
            port=config.port,
            log_level=config.log_level,
            limits=config.limits,
            closing=lambda: hub.health.problem(DRAINING) is not None,
            tls_cert=config.tls_cert,
            tls_key=config.tls_key,
            tls_client_ca=config.tls_client_ca,
        )

    @property
    def url(self) -> str:
        return self.server.url

    async def start(self) -> None:
        await self.server.start()

    async def stop(self, grace: float) -> None:
        # The hub has ended every subscription by now, so streams are closing.
        await self.server.stop()

    def describe(self) -> str:
        routes = ", ".join(["page", "/api/sessions", "/v1/runs", *self.extra_paths, "/docs"])
        return f"HTTP/SSE on {self.url}/ ({routes})"


class _Prefixed:
    """Sends a path under a mount's prefix to its app, the rest to ``app``."""

    def __init__(self, app: ASGIApp, mounts: Sequence[tuple[str, ASGIApp]]) -> None:
        self.app = app
        self.mounts = list(mounts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            path = scope.get("path", "")
            for prefix, app in self.mounts:
                if path.startswith(prefix):
                    await app(scope, receive, send)
                    return
        await self.app(scope, receive, send)
