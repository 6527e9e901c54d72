"""The server's telemetry bundle: built once, handed to the hub and each transport."""

from __future__ import annotations

from collections.abc import Sequence

import grpc
from opentelemetry import trace
from starlette.middleware import Middleware
from starlette.routing import BaseRoute

from omni_grpc.observability import tracing
from omni_grpc.observability.grpc_server import TelemetryInterceptor
from omni_grpc.observability.http import TelemetryMiddleware
from omni_grpc.observability.metrics import ServerMetrics
from omni_grpc.observability.observer import HubObserver, HubTelemetry


class Telemetry:
    """Metrics (None: off) and spans (None: no SDK provider records them)."""

    def __init__(
        self,
        metrics: ServerMetrics | None,
        tracer_provider: trace.TracerProvider | None = None,
        engine_name: str = "engine",
        max_attempts: int | None = None,
    ) -> None:
        self.metrics = metrics
        self.tracer_provider = tracing.sdk_provider(tracer_provider)
        self.tracer = (
            self.tracer_provider.get_tracer(tracing.TRACER_NAME)
            if self.tracer_provider is not None
            else None
        )
        self.engine_name = engine_name
        # The engine's attempts per model request, when it says (RetriesRequests).
        self.max_attempts = max_attempts

    @property
    def active(self) -> bool:
        return self.metrics is not None or self.tracer is not None

    def hub_observer(self) -> HubObserver:
        # Even with metrics and tracing off, runs give their ids to the log records.
        return HubTelemetry(self.metrics, self.tracer, self.engine_name, self.max_attempts)

    def grpc_interceptors(self) -> list[grpc.aio.ServerInterceptor]:
        return [TelemetryInterceptor(self.metrics, self.tracer)] if self.active else []

    def http_middleware(self, routes: Sequence[BaseRoute]) -> Middleware:
        return Middleware(
            TelemetryMiddleware, routes=routes, metrics=self.metrics, tracer=self.tracer
        )
