"""The HTTP/SSE transport for the server bootstrap (``omni-grpc serve``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from omni_grpc.observability.telemetry import Telemetry
from omni_grpc.runtime.interface import Runtime
from omni_grpc.transport.sse.app import create_app
from omni_grpc.transport.sse.guard import default_hosts
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
    # GET /metrics without the token (when metrics are on).
    public_metrics: bool = False
    # Host names answered; empty: the loopback names and the bound address.
    allowed_hosts: Sequence[str] = field(default_factory=tuple)


class SseTransport:
    def __init__(self, hub: Runtime, config: SseConfig, telemetry: Telemetry | None = None) -> None:
        self.config = config
        self.metrics = telemetry is not None and telemetry.metrics is not None
        app = create_app(
            hub,
            token=config.auth_token,
            cors_origins=config.cors_origins,
            max_body_bytes=config.max_body_bytes,
            heartbeat=config.heartbeat,
            telemetry=telemetry,
            public_metrics=config.public_metrics,
            allowed_hosts=config.allowed_hosts or default_hosts(config.host),
        )
        self.server = HttpServer(
            app, host=config.host, port=config.port, log_level=config.log_level
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
        routes = "page, /api/sessions, /v1/runs" + (", /metrics" if self.metrics else "")
        return f"HTTP/SSE on {self.url}/ ({routes})"
