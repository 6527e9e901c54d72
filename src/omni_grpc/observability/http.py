"""HTTP telemetry: requests per route template and status, open SSE streams, a span
per request, and the ``/metrics`` endpoint.

The middleware labels a request with the template of the route that serves it
(``/api/sessions/{sid}/stream``), never the raw path, so session ids and
probes for random paths do not become series.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence

from opentelemetry import trace
from prometheus_client.exposition import choose_encoder
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Match, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from omni_grpc.observability import tracing
from omni_grpc.observability.metrics import OTHER, ServerMetrics
from omni_grpc.transport.http_call import BearerAuth
from omni_grpc.transport.sse.guard import RequestGuard, default_hosts
from omni_grpc.transport.sse.server import HttpServer

METRICS_PATH = "/metrics"
UNMATCHED = "unmatched"
HTTP_METHODS = frozenset(
    {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "CONNECT", "TRACE"}
)


def route_template(routes: Sequence[BaseRoute], scope: Scope) -> str:
    """The path template of the route ``scope`` goes to (also on a 405), else unmatched."""
    partial: str | None = None
    for route in routes:
        match, _ = route.matches(scope)
        path = getattr(route, "path", None)
        if match is Match.FULL:
            return str(path) if path is not None else UNMATCHED
        if match is Match.PARTIAL and partial is None and path is not None:
            partial = str(path)
    return partial or UNMATCHED


class TelemetryMiddleware:
    """Outermost middleware of the HTTP app (so refused requests count too)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        routes: Sequence[BaseRoute],
        metrics: ServerMetrics | None,
        tracer: trace.Tracer | None,
    ) -> None:
        self.app = app
        self.routes = routes
        self.metrics = metrics
        self.tracer = tracer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        route = route_template(self.routes, scope)
        # The method is the client's text: only the standard ones become labels.
        method = scope["method"] if scope["method"] in HTTP_METHODS else OTHER
        start = time.perf_counter()
        status = 500  # unless a response starts
        streaming = False
        span: trace.Span | None = None
        token = None
        # Scrapes are counted, not traced: one span every few seconds per scraper.
        if self.tracer is not None and route != METRICS_PATH:
            span = self.tracer.start_span(
                f"{method} {route}",
                context=tracing.extract_pairs(scope.get("headers")),
                kind=trace.SpanKind.SERVER,
                attributes={
                    "http.request.method": method,
                    "http.route": route,
                    "url.path": scope.get("path", ""),
                },
            )
            token = tracing.attach_span(span)
        metrics = self.metrics

        async def observe(message: Message) -> None:
            nonlocal status, streaming
            if message["type"] == "http.response.start":
                status = int(message["status"])
                for name, value in message.get("headers", ()):
                    if name.lower() == b"content-type" and value.startswith(b"text/event-stream"):
                        streaming = True
                        if metrics is not None:
                            metrics.sse_streams_open.labels(route).inc()
            await send(message)

        try:
            await self.app(scope, receive, observe)
        finally:
            if metrics is not None:
                if streaming:
                    metrics.sse_streams_open.labels(route).dec()
                metrics.http_requests.labels(route, method, str(status)).inc()
                metrics.http_request_seconds.labels(route, method).observe(
                    time.perf_counter() - start
                )
            if span is not None:
                span.set_attribute("http.response.status_code", status)
                if status >= 500:
                    span.set_status(trace.StatusCode.ERROR)
                span.end()
                if token is not None:
                    tracing.reset(token)


def metrics_endpoint(metrics: ServerMetrics) -> Callable[[Request], Awaitable[Response]]:
    """A Starlette endpoint rendering ``metrics`` (OpenMetrics when the scraper asks)."""

    async def render(request: Request) -> Response:
        encoder, content_type = choose_encoder(request.headers.get("accept", ""))
        return Response(encoder(metrics.registry), headers={"content-type": content_type})

    return render


def metrics_route(metrics: ServerMetrics) -> Route:
    return Route(METRICS_PATH, metrics_endpoint(metrics), methods=["GET"])


class MetricsTransport:
    """``/metrics`` alone on its own port (``--metrics-port``), for servers without
    the HTTP app; the same bearer token as the other transports unless public."""

    def __init__(
        self,
        metrics: ServerMetrics,
        *,
        host: str = "127.0.0.1",
        port: int = 9464,
        token: str | None = None,
        public: bool = False,
        allowed_hosts: Sequence[str] = (),
    ) -> None:
        self.host = host
        self.port = port
        # The HTTP app's Host rule: a rebound DNS name must not read the metrics.
        hosts = allowed_hosts or default_hosts(host)
        middleware = [Middleware(RequestGuard, allowed_hosts=hosts)]
        if token and not public:
            middleware.append(Middleware(BearerAuth, token=token, public_paths=frozenset()))
        app = Starlette(routes=[metrics_route(metrics)], middleware=middleware)
        self.server = HttpServer(app, host=host, port=port)

    @property
    def url(self) -> str:
        return self.server.url + METRICS_PATH

    async def start(self) -> None:
        await self.server.start()

    async def stop(self, grace: float) -> None:
        await self.server.stop()

    def describe(self) -> str:
        return f"metrics on {self.url}"
