"""``omni-grpc serve``: the demo (or any) engine behind AgentService."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import logging
import math
import os
import re
import signal
import socket
import sys
from pathlib import Path
from typing import NoReturn

from omni_grpc.cli import banner, checks
from omni_grpc.cli.large_blocks import map_large_blocks
from omni_grpc.cli.stop_signals import EXIT_FORCED, SECOND_SIGNAL_BUDGET, StopSignals
from omni_grpc.engines.loader import EngineLoadError, registered
from omni_grpc.message_size import GRPC_MAX_MESSAGE_BYTES, HTTP_MAX_BODY_BYTES
from omni_grpc.observability import logs, tracing
from omni_grpc.observability.logs import LOG_FORMATS
from omni_grpc.runtime.approvals import ApprovalMode
from omni_grpc.runtime.data_dir_lock import DataDirInUse
from omni_grpc.runtime.errors import BackendUnavailable
from omni_grpc.runtime.limits import OVERLOAD_MIN_RUNS, Limits
from omni_grpc.runtime.resumption import DEFAULT_RESUME_RUNS, DEFAULT_RESUME_WITHIN, ResumeLimits
from omni_grpc.server import OmniServer, ServerConfig, TransportStartError, build_server
from omni_grpc.transport.a2a import A2aConfig
from omni_grpc.transport.grpc import GrpcConfig, GrpcTransport
from omni_grpc.transport.sse.http_limits import (
    DEFAULT_BODY_TIMEOUT,
    DEFAULT_HEADER_TIMEOUT,
    DEFAULT_IDLE_TIMEOUT,
    DEFAULT_MAX_CONNECTIONS,
    HttpLimits,
)
from omni_grpc.transport.sse.transport import SseConfig, SseTransport

EXIT_USAGE = 2
# Seconds running tasks get on SIGTERM (Kubernetes' default grace period).
DRAIN_TIMEOUT = 30.0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    engines = "; ".join(f"{name}: {text}" for name, text in registered())
    parser = subparsers.add_parser(
        "serve",
        help="run the AgentService (gRPC) over an engine",
        description="Serve an agent engine over gRPC (health checking and reflection "
        "included). Engines: " + engines + "; or module:factory.",
    )
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="read flags from this TOML file (default $OMNI_CONFIG): each key a flag "
        "without its dashes (grpc-port = 50051). Every flag also reads OMNI_<FLAG> "
        "(OMNI_GRPC_PORT=50051); the command line wins, then the environment, then the file",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default %(default)s)")
    parser.add_argument("--grpc-port", type=checks.port, default=50051, help="0 picks a free port")
    parser.add_argument("--engine", default="demo", help="engine spec (default %(default)s)")
    parser.add_argument(
        "--engine-opt",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="engine option, repeatable",
    )
    parser.add_argument(
        "--base-url",
        help="openai engine: the endpoint, e.g. http://127.0.0.1:8000/v1 "
        "(default $OPENAI_BASE_URL); same as --engine-opt base_url=",
    )
    parser.add_argument(
        "--model",
        help="openai engine: the model id (default $OPENAI_MODEL); same as --engine-opt model=",
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=Path(".omni-grpc"),
        help="traces and workspaces go here (default %(default)s, in the current directory)",
    )
    parser.add_argument(
        "--approval-mode",
        choices=[m.value for m in ApprovalMode],
        default=ApprovalMode.ALLOW_ALL.value,
        help="for runs that do not choose one (default %(default)s)",
    )
    parser.add_argument(
        "--allow-client-modes",
        type=checks.approval_modes,
        metavar="MODE,...",
        help="approval modes a client may ask for; wider ones are refused "
        "(PERMISSION_DENIED / 403). Default: --approval-mode and the narrower ones "
        "(allow-all: every mode; ask or read-only: itself and deny-all)",
    )
    parser.add_argument(
        "--pacing", type=checks.seconds, default=None, help="demo engine: seconds between deltas"
    )
    parser.add_argument(
        "--auth-token",
        default=os.environ.get("OMNI_AUTH_TOKEN"),
        help="require this bearer token on every RPC but health (default $OMNI_AUTH_TOKEN); "
        "visible to other users in ps, so prefer --auth-token-file or the variable",
    )
    parser.add_argument(
        "--auth-token-file",
        type=checks.readable_file,
        metavar="PATH",
        help="read the bearer token from this file (trailing newline ignored)",
    )
    limits = Limits()
    parser.add_argument(
        "--max-sessions",
        type=checks.at_least(1),
        default=limits.max_sessions,
        help="sessions the server keeps; new ones past it are refused with "
        "RESOURCE_EXHAUSTED / 429 until sessions are deleted (sessions rm, --session-ttl) "
        "(default %(default)s; with --redis-url, for all replicas)",
    )
    parser.add_argument(
        "--max-runs",
        type=checks.at_least(1),
        default=limits.max_runs,
        help="runs this server executes at once; more are refused with "
        "RESOURCE_EXHAUSTED / 429 (default %(default)s)",
    )
    parser.add_argument(
        "--max-loop-busy",
        type=checks.at_least(0, 100),
        default=limits.max_loop_busy,
        help="percent of the last second this server's event loop may be busy while "
        f"it runs {OVERLOAD_MIN_RUNS} or more runs; past it new runs are refused with "
        "RESOURCE_EXHAUSTED / 429 at once, instead of waiting on a saturated server "
        "until gRPC cancels them; 0: never (default %(default)s)",
    )
    parser.add_argument(
        "--max-streams-per-session",
        type=checks.at_least(1),
        default=limits.max_streams_per_session,
        help="open streams (Run, Attach, SSE) per session on this server; more are "
        "refused with RESOURCE_EXHAUSTED / 429 (default %(default)s)",
    )
    parser.add_argument(
        "--max-approval-wait",
        type=checks.positive_seconds,
        default=limits.approval_wait,
        metavar="SECONDS",
        help="a tool call waiting longer for Approve is denied, as if the client "
        "answered deny; the run goes on (default %(default)s)",
    )
    parser.add_argument(
        "--session-ttl",
        type=checks.positive_seconds,
        default=None,
        metavar="SECONDS",
        help="delete sessions idle (no run, no stream) for longer than this: they leave "
        "the index, their buffers are freed, their Redis keys removed (default: kept "
        "until deleted with DeleteSession, DELETE /api/sessions/ID or sessions rm)",
    )
    parser.add_argument(
        "--session-ttl-traces",
        choices=("keep", "delete"),
        default="keep",
        help="what --session-ttl does with an expired session's trace and workspace: "
        "keep moves them to DATA_DIR/deleted/ (readable, never indexed again), delete "
        "removes them (default %(default)s)",
    )
    parser.add_argument(
        "--http-port", type=checks.port, default=8080, help="HTTP/SSE port, 0 picks a free port"
    )
    parser.add_argument("--no-http", action="store_true", help="serve gRPC only")
    parser.add_argument(
        "--cors-origin",
        action="append",
        default=[],
        help="a browser origin allowed to call the HTTP port (SSE routes, Connect and "
        "gRPC-Web), repeatable; '*' for any (default: none)",
    )
    parser.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a Host name the HTTP side answers to, repeatable; '*' for any "
        "(default: localhost, 127.0.0.1, ::1 and the --host address)",
    )
    parser.add_argument(
        "--http-max-body", type=checks.at_least(1), default=HTTP_MAX_BODY_BYTES, help="bytes"
    )
    parser.add_argument(
        "--sse-heartbeat", type=checks.seconds, default=20.0, help="seconds, 0 disables"
    )
    parser.add_argument(
        "--tls-cert",
        type=checks.readable_file,
        help="PEM certificate chain (enables TLS on the gRPC and the HTTP port)",
    )
    parser.add_argument("--tls-key", type=checks.readable_file, help="PEM private key")
    parser.add_argument(
        "--tls-client-ca", type=checks.readable_file, help="require client certs from this CA"
    )
    # grpcio keeps these in a C int.
    int32 = checks.at_least(1, 2**31 - 1)
    parser.add_argument(
        "--max-message-bytes", type=int32, default=GRPC_MAX_MESSAGE_BYTES, help="bytes"
    )
    parser.add_argument(
        "--grpc-compressed-requests",
        action="store_true",
        help="accept gzip/deflate request messages on the gRPC port (grpcio inflates them"
        " on the event loop, so one bomb stalls every client; refused by default)",
    )
    parser.add_argument("--keepalive-time-ms", type=int32, default=30_000)
    parser.add_argument("--keepalive-timeout-ms", type=int32, default=10_000)
    parser.add_argument(
        "--max-connections",
        type=checks.at_least(1, 2**31 - 1),
        default=DEFAULT_MAX_CONNECTIONS,
        metavar="N",
        help="open connections per listener (gRPC, HTTP); lowered to fit ulimit -n, "
        "with descriptors kept for traces (default %(default)s)",
    )
    parser.add_argument(
        "--header-timeout",
        type=checks.positive_seconds,
        default=DEFAULT_HEADER_TIMEOUT,
        metavar="SECONDS",
        help="an HTTP request's headers, and a gRPC connection's handshake, must "
        "arrive within this (default %(default)s)",
    )
    parser.add_argument(
        "--body-timeout",
        type=checks.positive_seconds,
        default=DEFAULT_BODY_TIMEOUT,
        metavar="SECONDS",
        help="longest pause between reads of an HTTP request body (default %(default)s)",
    )
    parser.add_argument(
        "--idle-timeout",
        type=checks.at_least(1),
        default=DEFAULT_IDLE_TIMEOUT,
        metavar="SECONDS",
        help="an HTTP keep-alive connection closes after this long without a request "
        "(default %(default)s)",
    )
    parser.add_argument(
        "--grpc-idle-timeout",
        type=checks.positive_seconds,
        default=300.0,
        metavar="SECONDS",
        help="a gRPC connection with no call for this long gets GOAWAY (default %(default)s)",
    )
    parser.add_argument(
        "--shutdown-grace",
        type=checks.seconds,
        default=5.0,
        metavar="SECONDS",
        help="after the drain, the stop gets this long to record aborts and close; "
        "the process is gone within --drain-timeout + this + 1 s of the first signal "
        "(default %(default)s)",
    )
    parser.add_argument(
        "--drain-timeout",
        type=checks.seconds,
        default=DRAIN_TIMEOUT,
        metavar="SECONDS",
        help="on SIGTERM or SIGINT, runs get this long to finish while new ones are "
        "refused (UNAVAILABLE / 503, health NOT_SERVING); then the rest are handed "
        "over to be resumed (aborted with --resume-runs 0 or an engine that cannot be "
        "resumed). "
        "A second signal stops at once (default %(default)s, as Kubernetes' grace period)",
    )
    parser.add_argument(
        "--buffer-events",
        type=checks.at_least(1),
        default=10_000,
        help="replay buffer per session (events)",
    )
    parser.add_argument(
        "--buffer-bytes",
        type=checks.at_least(1),
        default=8 * 1024 * 1024,
        help="replay buffer (UTF-16 units)",
    )
    parser.add_argument(
        "--log-level",
        type=str.lower,
        choices=("debug", "info", "warning", "error", "critical"),
        default="warning",
    )
    parser.add_argument(
        "--redis-url",
        default=os.environ.get("OMNI_REDIS_URL"),
        help="share sessions between replicas through Redis Streams, e.g. "
        "redis://host:6379/0 or unix:///run/redis.sock (default $OMNI_REDIS_URL; "
        "none: everything stays in this process)",
    )
    parser.add_argument(
        "--owner-loss-timeout",
        type=float,
        default=12.0,
        help="with --redis-url: seconds within which another replica takes over a run "
        "whose replica died, to resume or close it (default %(default)s)",
    )
    parser.add_argument(
        "--resume-runs",
        type=checks.at_least(0),
        default=DEFAULT_RESUME_RUNS,
        metavar="N",
        help="a run whose process was lost (its replica died, a drain ran out, the "
        "server restarted on its data dir) goes on from its trace, at most N times per "
        "task; 0: such runs are closed with abort (default %(default)s)",
    )
    parser.add_argument(
        "--resume-within",
        type=checks.positive_seconds,
        default=DEFAULT_RESUME_WITHIN,
        metavar="SECONDS",
        help="a task is resumed only within this long of its start (default %(default)s)",
    )
    parser.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        default="text",
        help="json: one JSON object per line, with session, run and trace ids (default text)",
    )
    parser.add_argument(
        "--metrics-port",
        type=checks.port,
        help="also serve GET /metrics on this port (0 picks one); for --no-http servers",
    )
    parser.add_argument(
        "--public-metrics",
        action="store_true",
        help="serve /metrics without the auth token (for a scraper on a trusted network)",
    )
    parser.add_argument("--no-metrics", action="store_true", help="collect no Prometheus metrics")
    parser.add_argument(
        "--no-a2a",
        action="store_true",
        help="serve no A2A (its card and JSON-RPC/HTTP+JSON routes, its gRPC service)",
    )
    parser.add_argument("--a2a-name", default="omni-grpc", help="the agent's name on its A2A card")
    parser.add_argument(
        "--a2a-description",
        help="the agent's description on its A2A card (default: names the engine)",
    )
    parser.add_argument(
        "--a2a-url",
        metavar="URL",
        help="the HTTP port's public base URL for the A2A card (behind a proxy;"
        " default the bound address)",
    )
    parser.add_argument(
        "--a2a-grpc-url",
        metavar="HOST:PORT",
        help="the gRPC port's public address for the A2A card (default the bound address)",
    )
    parser.set_defaults(handler=run_serve)


def engine_options(pairs: list[str]) -> dict[str, str]:
    options: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--engine-opt {pair!r}: expected KEY=VALUE")
        options[key] = value
    return options


def auth_token(args: argparse.Namespace) -> str | None:
    """The token from --auth-token-file, --auth-token or $OMNI_AUTH_TOKEN."""
    if args.auth_token_file is None:
        return str(args.auth_token) if args.auth_token else None
    if args.auth_token and args.auth_token != os.environ.get("OMNI_AUTH_TOKEN"):
        raise ValueError("argument --auth-token-file: not together with --auth-token")
    token: str = args.auth_token_file.read_text(encoding="utf-8").strip()
    if not token or any(ch.isspace() for ch in token):
        raise ValueError(
            f"argument --auth-token-file: {args.auth_token_file} must hold one token "
            "(no spaces, not empty)"
        )
    return token


def config_from(args: argparse.Namespace) -> ServerConfig:
    options = engine_options(args.engine_opt)
    token = auth_token(args)
    # Shortcuts for the engine most people point at a model server.
    for flag, key in ((args.base_url, "base_url"), (args.model, "model")):
        if flag is not None:
            options.setdefault(key, flag)
    if args.pacing is not None:
        options["pacing"] = str(args.pacing)
    grpc_config = GrpcConfig(
        host=args.host,
        port=args.grpc_port,
        auth_token=token,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        tls_client_ca=args.tls_client_ca,
        max_message_bytes=args.max_message_bytes,
        keepalive_time_ms=args.keepalive_time_ms,
        keepalive_timeout_ms=args.keepalive_timeout_ms,
        max_connections=args.max_connections,
        handshake_timeout_ms=max(1, int(args.header_timeout * 1000)),
        idle_timeout_ms=max(1, int(args.grpc_idle_timeout * 1000)),
        compressed_requests=args.grpc_compressed_requests,
    )
    return ServerConfig(
        engine=args.engine,
        engine_options=options,
        data_dir=args.data_dir,
        approval_mode=ApprovalMode(args.approval_mode),
        client_modes=args.allow_client_modes,
        grpc=grpc_config,
        http=None
        if args.no_http
        else SseConfig(
            host=args.host,
            port=args.http_port,
            auth_token=token,
            cors_origins=tuple(args.cors_origin),
            allowed_hosts=tuple(args.allowed_host),
            max_body_bytes=args.http_max_body,
            heartbeat=args.sse_heartbeat or None,
            log_level=args.log_level,
            public_metrics=args.public_metrics,
            tls_cert=args.tls_cert,
            tls_key=args.tls_key,
            tls_client_ca=args.tls_client_ca,
            limits=HttpLimits(
                header_timeout=args.header_timeout,
                body_timeout=args.body_timeout,
                idle_timeout=args.idle_timeout,
                max_connections=args.max_connections,
            ),
        ),
        shutdown_grace=args.shutdown_grace,
        buffer_events=args.buffer_events,
        buffer_bytes=args.buffer_bytes,
        metrics=not args.no_metrics,
        metrics_port=args.metrics_port,
        metrics_host=args.host,
        metrics_allowed_hosts=tuple(args.allowed_host),
        public_metrics=args.public_metrics,
        a2a=None
        if args.no_a2a
        else A2aConfig(
            name=args.a2a_name,
            description=args.a2a_description or None,
            url=args.a2a_url or None,
            grpc_url=args.a2a_grpc_url or None,
        ),
        redis_url=args.redis_url or None,
        owner_loss_timeout=args.owner_loss_timeout,
        resume=ResumeLimits(args.resume_runs, args.resume_within),
        limits=Limits(
            max_sessions=args.max_sessions,
            max_runs=args.max_runs,
            max_loop_busy=args.max_loop_busy,
            max_streams_per_session=args.max_streams_per_session,
            approval_wait=args.max_approval_wait,
            session_ttl=args.session_ttl or math.inf,
            delete_expired_traces=args.session_ttl_traces == "delete",
        ),
    )


async def serve(server: OmniServer, drain_timeout: float = DRAIN_TIMEOUT) -> int:
    """Serves until a signal, drains, stops; the process's exit status."""
    signals: asyncio.Queue[signal.Signals] = asyncio.Queue()
    stopping = StopSignals(signals, drain_timeout, server.shutdown_grace)
    stopping.install()
    await server.start()
    for line in server.describe():
        print(f"omni-grpc serving {line}", flush=True)
    if server.data_dir is not None:
        print(f"omni-grpc data in {server.data_dir} (traces/, workspaces/)", flush=True)
    if server.hub.backend.name != "memory":
        print(f"omni-grpc sessions shared through {server.hub.backend.name}", flush=True)
    print("omni-grpc ready", flush=True)  # scripts and tests wait for this line
    finished = False
    try:
        first = await signals.get()
        await _drain(server, signals, first, drain_timeout)
    finally:
        print("omni-grpc shutting down", flush=True)
        budget = SECOND_SIGNAL_BUDGET if stopping.second else None
        finished = await server.stop("server shutting down", budget)
    if not finished:
        print(
            "omni-grpc stopped before its shutdown finished (see the log for what was pending)",
            file=sys.stderr,
            flush=True,
        )
        return EXIT_FORCED
    return 0


async def _drain(
    server: OmniServer,
    signals: asyncio.Queue[signal.Signals],
    first: signal.Signals,
    timeout: float,
) -> None:
    """Lets the running tasks finish, for up to ``timeout`` seconds or until
    a second signal; new runs are refused meanwhile."""
    running = server.hub.running
    print(
        f"omni-grpc draining ({first.name}): new runs refused; {running} running "
        f"get up to {timeout:g} s to finish (SIGTERM or SIGINT again stops now)",
        flush=True,
    )
    draining = asyncio.ensure_future(server.drain(timeout))
    again = asyncio.ensure_future(signals.get())
    try:
        await asyncio.wait({draining, again}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        again.cancel()
        draining.cancel()
    left = server.hub.running
    if left:
        why = "a second signal" if again.done() and not again.cancelled() else "the drain timeout"
        print(f"omni-grpc stopping {left} unfinished run(s) after {why}", flush=True)


def bind_failure(exc: TransportStartError) -> str:
    """Which transport could not bind where, why, and the flag that moves it."""
    transport = exc.transport
    if isinstance(transport, GrpcTransport):
        what, host, port, flag = "gRPC", transport.config.host, transport.config.port, "--grpc-port"
    elif isinstance(transport, SseTransport):
        what, host, port, flag = (
            "HTTP/SSE",
            transport.config.host,
            transport.config.port,
            "--http-port",
        )
    else:
        return str(exc)
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    # grpcio does not say why a bind failed; a plain bind of the same address does.
    code = getattr(exc.cause, "errno", None) or _probe_bind(host, port)
    if code in _PORT_ERRORS:
        hint = f"; choose another port with {flag} (0 picks a free one)"
        return f"cannot bind {what} to {address}: {_PORT_ERRORS[code]}{hint}"
    if code == errno.EADDRNOTAVAIL:
        return f"cannot bind {what} to {address}: {host} is not an address of this machine (--host)"
    return f"cannot bind {what} to {address}: {exc.cause}"


_PORT_ERRORS = {
    errno.EADDRINUSE: "the port is already in use",
    errno.EACCES: "permission denied (ports below 1024 need privileges)",
}


def _probe_bind(host: str, port: int) -> int | None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, port))
    except OSError as exc:
        return exc.errno
    return None


def run_serve(args: argparse.Namespace) -> int:
    if args.no_metrics and args.metrics_port is not None:
        print("omni-grpc serve: --metrics-port and --no-metrics contradict", file=sys.stderr)
        return EXIT_USAGE
    problem = checks.data_dir_problem(args.data_dir.expanduser())
    if problem is not None:
        print(
            f"omni-grpc serve: error: argument --data-dir: {args.data_dir}: {problem}",
            file=sys.stderr,
        )
        return EXIT_USAGE
    map_large_blocks()  # before any large message is read (cli/large_blocks.py)
    try:
        tracing.configure_from_env()
        config = config_from(args)
        server = build_server(config)
    except (EngineLoadError, ValueError, OSError) as exc:
        print(f"omni-grpc serve: {exc}", file=sys.stderr)
        return EXIT_USAGE
    # After build_server: uvicorn's Config installs its own handlers, which this replaces.
    logs.configure(args.log_level, args.log_format, _secrets(config))
    for line in banner.startup_lines(server, config):
        print(f"omni-grpc {line}", flush=True)
    warning = banner.exposure_warning(config)
    if warning is not None:
        print(f"omni-grpc serve: warning: {warning}", file=sys.stderr, flush=True)
    try:
        status = asyncio.run(serve(server, args.drain_timeout))
    except BackendUnavailable as exc:
        if _misconfigured(exc):
            print(f"omni-grpc serve: error: argument --redis-url: {exc.detail}", file=sys.stderr)
            return EXIT_USAGE
        print(f"omni-grpc serve: --redis-url: {exc}", file=sys.stderr)
        return 1
    except TransportStartError as exc:
        print(f"omni-grpc serve: {bind_failure(exc)}", file=sys.stderr)
        return 1
    except DataDirInUse as exc:
        print(f"omni-grpc serve: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"omni-grpc serve: {exc}", file=sys.stderr)
        return 1
    finally:
        tracing.shutdown()  # flushes the spans still batched
    _exit_now(status)


def _exit_now(status: int) -> NoReturn:
    """Ends a server process once its shutdown is done (or given up).

    The interpreter's own finalization has nothing left to save (the traces
    are closed, the spans flushed) but can take seconds on a loaded machine,
    or for good: grpcio's core waits for its threads at exit, and a thread
    the shutdown gave up on (a file lock, a socket) is joined. Seen: a drain
    finished, then the process stayed for 4 s and more beside CPU-bound
    processes. So the process ends here, after flushing what it printed."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(status)


def _misconfigured(exc: BackendUnavailable) -> bool:
    """The URL names a Redis Cluster node or a Sentinel: a usage error, not an outage."""
    from omni_grpc.runtime.redis.connection import NotAPrimary  # loaded already if raised

    return isinstance(exc, NotAPrimary)


def _secrets(config: ServerConfig) -> list[str | None]:
    """Values the logs must never show: the auth token and secret-looking engine options."""
    values: list[str | None] = [
        config.grpc.auth_token if config.grpc else None,
        os.environ.get("OPENAI_API_KEY"),
    ]
    values += [v for k, v in config.engine_options.items() if _SECRET_OPTION.search(k)]
    return values


_SECRET_OPTION = re.compile(r"(?i)key|token|secret|password")
