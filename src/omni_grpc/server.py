"""The server bootstrap: one engine, one hub, any number of transports.

``OmniServer`` starts the transports over a shared hub and stops them in the
order that keeps traces consistent: first the streams that never end on their
own (gRPC Health.Watch, reflection) end, then the hub aborts every running
task (each stream still delivers its ``abort`` and ``task_state idle``) and
ends every subscription, then each transport closes. The whole stop has a
budget (``shutdown_grace``): what has not finished by then is given up, and
``stop`` says so, so no stuck await (a backend that never answers, an
engine that never yields its abort) keeps a stopping process alive. A
transport is anything with ``start()``, ``stop(grace)`` and ``describe()``;
``omni-grpc serve`` adds gRPC, and the HTTP/SSE transport is added beside it
the same way.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

from opentelemetry.trace import TracerProvider
from starlette.routing import BaseRoute
from starlette.types import ASGIApp

from omni_grpc.descriptors import fit_caps, warn_fitted
from omni_grpc.engines.base import ListsTools, RetriesRequests
from omni_grpc.engines.loader import load_engine
from omni_grpc.observability.http import MetricsTransport, metrics_route
from omni_grpc.observability.metrics import ServerMetrics
from omni_grpc.observability.telemetry import Telemetry
from omni_grpc.runtime.approvals import ApprovalMode
from omni_grpc.runtime.backend import Backend, memory_backend
from omni_grpc.runtime.data_dir_lock import DataDirLock
from omni_grpc.runtime.event_log import ReplayWindow
from omni_grpc.runtime.hub import Hub
from omni_grpc.runtime.limits import Limits
from omni_grpc.runtime.resumption import ResumeLimits
from omni_grpc.transport.a2a import CHAT, A2aBinding, A2aConfig, Skill
from omni_grpc.transport.connect import PREFIX, ConnectApp, ConnectConfig, ConnectTransport
from omni_grpc.transport.grpc import GrpcConfig, GrpcTransport
from omni_grpc.transport.http_checks import default_hosts
from omni_grpc.transport.sse.transport import SseConfig, SseTransport

log = logging.getLogger(__name__)


class Transport(Protocol):
    async def start(self) -> None: ...

    async def stop(self, grace: float) -> None: ...

    def describe(self) -> str: ...


@runtime_checkable
class EndsStreams(Protocol):
    """A transport with calls that never end on their own (gRPC's Watch)."""

    async def end_streams(self) -> None: ...


@dataclass
class ServerConfig:
    engine: str = "demo"
    engine_options: dict[str, str] = field(default_factory=dict)
    data_dir: Path = Path(".omni-grpc")
    approval_mode: ApprovalMode = ApprovalMode.ALLOW_ALL
    # The modes clients may ask for (None: approval_mode and narrower ones).
    client_modes: tuple[ApprovalMode, ...] | None = None
    grpc: GrpcConfig | None = field(default_factory=GrpcConfig)
    # The HTTP/SSE shim beside gRPC (None: gRPC only).
    http: SseConfig | None = None
    # AgentService over Connect and gRPC-Web on the HTTP port too.
    connect: bool = True
    # A2A on both ports (the card and JSON-RPC/HTTP+JSON on HTTP, the A2A
    # service on gRPC); None: not served.
    a2a: A2aConfig | None = field(default_factory=A2aConfig)
    # Seconds in-flight calls get to finish on shutdown.
    shutdown_grace: float = 5.0
    # Each session's replay window (reference defaults), whatever the backend.
    buffer_events: int = ReplayWindow.max_events
    buffer_bytes: int = ReplayWindow.max_bytes
    # Seconds an engine gets to yield its abort before the hub closes the run.
    abort_grace: float = 10.0
    # Runs whose process was lost go on from their trace, this many times per task.
    resume: ResumeLimits = field(default_factory=ResumeLimits)
    # Prometheus metrics (on /metrics of the HTTP app, and on metrics_port if set).
    metrics: bool = True
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"
    # Host names the metrics port answers (default: loopback and metrics_host).
    metrics_allowed_hosts: tuple[str, ...] = ()
    # Serve /metrics without the bearer token.
    public_metrics: bool = False
    # Spans go here; None: the global provider, if an SDK one is installed.
    tracer_provider: TracerProvider | None = None
    # Shared state for several replicas (redis://, rediss:// or unix:// URL);
    # None keeps everything in this process.
    redis_url: str | None = None
    # Seconds within which a run whose replica died is closed by another one.
    owner_loss_timeout: float = 12.0
    # What one replica holds at once (sessions, runs, streams, approval wait).
    limits: Limits = field(default_factory=Limits)


class TransportStartError(OSError):
    """A transport failed to start (most often: its port is taken); names which."""

    def __init__(self, transport: Transport, cause: BaseException) -> None:
        super().__init__(f"{transport.describe()}: {cause}")
        self.transport = transport
        self.cause = cause


class OmniServer:
    def __init__(
        self,
        hub: Hub,
        transports: list[Transport],
        shutdown_grace: float = 5.0,
        data_dir: Path | None = None,
        telemetry: Telemetry | None = None,
    ) -> None:
        self.hub = hub
        self.telemetry = telemetry
        # Where traces and workspaces go (absolute), for the startup banner.
        self.data_dir = data_dir
        self.transports = transports
        self.shutdown_grace = shutdown_grace
        # Held from before the hub reads (or repairs) anything until stop().
        self.lock = (
            DataDirLock(data_dir, shared=hub.backend.shared) if data_dir is not None else None
        )

    async def start(self) -> None:
        if self.lock is not None:
            self.lock.acquire()  # DataDirInUse: nothing was touched
        try:
            await self._start()
        except BaseException:
            if self.lock is not None:
                self.lock.release()
            raise

    async def _start(self) -> None:
        await self.hub.start()
        started: list[Transport] = []
        try:
            for transport in self.transports:
                try:
                    await transport.start()
                except (OSError, RuntimeError) as exc:
                    raise TransportStartError(transport, exc) from exc
                started.append(transport)
        except BaseException:
            for transport in reversed(started):
                await transport.stop(0)
            raise

    async def drain(self, timeout: float) -> bool:
        """Stops taking new runs and gives the running ones up to ``timeout``
        seconds to finish; True when they all did. ``stop`` aborts the rest."""
        self.hub.drain()
        try:
            await asyncio.wait_for(self.hub.wait_drained(), timeout)
        except TimeoutError:
            return False
        return True

    async def stop(self, reason: str = "server shutting down", budget: float | None = None) -> bool:
        """Ends every stream, aborts the running tasks, closes the transports,
        within ``budget`` seconds (default ``shutdown_grace``). False when the
        budget ran out first: what was still pending is logged and abandoned
        (the process should exit; a restart's recovery closes what is open)."""
        budget = self.shutdown_grace if budget is None else budget
        deadline = time.monotonic() + budget
        try:
            await asyncio.wait_for(self._stop(reason, deadline), budget)
        except TimeoutError:
            log.warning(
                "the shutdown did not finish within %g s; still waiting: %s",
                budget,
                ", ".join(_pending_tasks()) or "nothing",
            )
            return False
        finally:
            if self.lock is not None:
                self.lock.release()
        return True

    async def _stop(self, reason: str, deadline: float) -> None:
        for transport in self.transports:
            if isinstance(transport, EndsStreams):
                await transport.end_streams()
        await self.hub.shutdown(reason)
        for transport in reversed(self.transports):
            await transport.stop(max(0.0, deadline - time.monotonic()))

    def describe(self) -> list[str]:
        return [t.describe() for t in self.transports]

    @property
    def grpc(self) -> GrpcTransport | None:
        return next((t for t in self.transports if isinstance(t, GrpcTransport)), None)


def _pending_tasks() -> list[str]:
    """Each unfinished task's name and where it waits, for the log."""
    where = []
    for task in asyncio.all_tasks():
        if task is asyncio.current_task() or task.done():
            continue
        stack = task.get_stack(limit=1)
        frame = f" at {stack[-1].f_code.co_name}:{stack[-1].f_lineno}" if stack else ""
        where.append(f"{task.get_name()}{frame}")
    return where


def _a2a_binding(
    config: ServerConfig, hub: Hub, engine: object, engine_name: str
) -> A2aBinding | None:
    if config.a2a is None or (config.grpc is None and config.http is None):
        return None
    skills = [CHAT]
    if isinstance(engine, ListsTools):
        skills += [
            Skill(f"tool:{t['name']}", str(t["name"]), str(t.get("description", "")))
            for t in engine.tool_definitions()
        ]
    token = config.grpc.auth_token if config.grpc is not None else None
    if config.http is not None:
        token = token or config.http.auth_token
    return A2aBinding(hub, config.a2a, engine_name=engine_name, skills=skills, token=bool(token))


def build_backend(config: ServerConfig) -> Backend:
    """The shared state the configuration asks for (in-process by default)."""
    window = ReplayWindow(config.buffer_events, config.buffer_bytes)
    if config.redis_url is None:
        return memory_backend(window)
    from omni_grpc.runtime.redis import redis_backend  # redis-py only when asked for

    return redis_backend(
        config.redis_url, window=window, owner_loss_timeout=config.owner_loss_timeout
    )


def _connect_app(hub: Hub, config: ServerConfig, telemetry: Telemetry) -> ASGIApp:
    """Connect and gRPC-Web on the HTTP port, with its token, hosts and CORS
    origins, gRPC's message limit, and the HTTP requests' telemetry."""
    http = config.http
    assert http is not None
    app = ConnectApp(
        hub,
        ConnectConfig(
            auth_token=http.auth_token,
            cors_origins=http.cors_origins,
            allowed_hosts=http.allowed_hosts or default_hosts(http.host),
            max_message_bytes=(config.grpc or GrpcConfig()).max_message_bytes,
        ),
    )
    middleware = telemetry.http_middleware(app.routes())
    return middleware.cls(app, *middleware.args, **middleware.kwargs)


def _fitted(config: ServerConfig) -> ServerConfig:
    """``config`` with its listeners' connection caps fitted to the
    descriptor limit (descriptors.py)."""
    footprint: dict[str, int] = {}
    if config.grpc is not None:
        footprint["gRPC"] = config.grpc.max_connections
    if config.http is not None:
        footprint["HTTP"] = config.http.limits.descriptors
    room, limit = fit_caps(footprint)
    wanted: dict[str, int] = {}
    caps: dict[str, int] = {}
    if config.grpc is not None:
        wanted["gRPC"], caps["gRPC"] = config.grpc.max_connections, room["gRPC"]
        grpc = dataclasses.replace(config.grpc, max_connections=caps["gRPC"])
        config = dataclasses.replace(config, grpc=grpc)
    if config.http is not None:
        http = config.http.limits
        wanted["HTTP"] = caps["HTTP"] = http.max_connections
        if room["HTTP"] < http.descriptors:  # the backlog's share shrinks with it
            caps["HTTP"] = max(1, room["HTTP"] * http.max_connections // http.descriptors)
        limits = dataclasses.replace(http, max_connections=caps["HTTP"])
        config = dataclasses.replace(config, http=dataclasses.replace(config.http, limits=limits))
    warn_fitted(limit, wanted, caps)
    return config


def build_server(config: ServerConfig, *, backend: Backend | None = None) -> OmniServer:
    """Loads the engine and wires the hub and the configured transports.

    ``backend`` replaces the one ``config`` describes (an embedder's own)."""
    engine = load_engine(config.engine, config.engine_options)
    telemetry = Telemetry(
        ServerMetrics() if config.metrics else None,
        config.tracer_provider,
        engine_name=str(getattr(engine, "name", None) or type(engine).__name__),
        max_attempts=engine.max_attempts if isinstance(engine, RetriesRequests) else None,
    )
    # Absolute, so recorded paths (session_meta.workspace) do not depend on the
    # directory the server happened to start in.
    data_dir = config.data_dir.expanduser().resolve()
    hub = Hub(
        engine,
        data_dir,
        default_approval=config.approval_mode,
        client_modes=config.client_modes,
        abort_grace=config.abort_grace,
        resume=config.resume,
        observer=telemetry.hub_observer(),
        backend=backend or build_backend(config),
        limits=config.limits,
    )
    transports: list[Transport] = []
    a2a = _a2a_binding(config, hub, engine, telemetry.engine_name)
    grpc_transport: GrpcTransport | None = None
    config = _fitted(config)
    if config.grpc is not None:
        services = [a2a.add_to_grpc_server] if a2a is not None else []
        grpc_transport = GrpcTransport(hub, config.grpc, telemetry.grpc_interceptors(), services)
        transports.append(grpc_transport)
    if config.http is not None:
        # /metrics is the server's, mounted beside the HTTP app's routes.
        extra: list[BaseRoute] = []
        if telemetry.metrics is not None:
            extra.append(metrics_route(telemetry.metrics))
        public: list[str] = []
        own_media: list[str] = []
        if a2a is not None:
            own_media.append(a2a.media_prefix)  # refused in A2A's words
            extra += a2a.routes()
            public.append(a2a.card_path)  # a client reads the card to learn it needs a token
        connect = _connect_app(hub, config, telemetry) if config.connect else None
        mounts = [(PREFIX, connect)] if connect is not None else []
        sse = SseTransport(hub, config.http, telemetry, extra, mounts, public, own_media)
        transports.append(sse)
        if connect is not None:
            transports.append(ConnectTransport(connect, lambda: sse.url))
        if a2a is not None:
            a2a.locate(http=lambda: sse.url)
    if a2a is not None and grpc_transport is not None:
        bound = grpc_transport
        a2a.locate(grpc_address=lambda: bound.address)
    if telemetry.metrics is not None and config.metrics_port is not None:
        token = config.grpc.auth_token if config.grpc is not None else None
        if config.http is not None:
            token = token or config.http.auth_token
        transports.append(
            MetricsTransport(
                telemetry.metrics,
                host=config.metrics_host,
                port=config.metrics_port,
                token=token,
                public=config.public_metrics,
                allowed_hosts=config.metrics_allowed_hosts,
            )
        )
    return OmniServer(hub, transports, config.shutdown_grace, data_dir, telemetry)
