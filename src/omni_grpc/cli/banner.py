"""What ``serve`` tells the operator at startup, beyond the addresses: the
engine and model, where sessions live, whether auth and tracing are on, and a
warning for the one setup that hands the machine to anyone who can reach it."""

from __future__ import annotations

import ipaddress

from omni_grpc.observability import tracing
from omni_grpc.server import OmniServer, ServerConfig
from omni_grpc.vocabulary import ApprovalMode


def startup_lines(server: OmniServer, config: ServerConfig) -> list[str]:
    """``engine ...`` and ``auth ...`` lines, without the ``omni-grpc`` prefix."""
    model = config.engine_options.get("model")
    engine = f"engine {config.engine}" + (f", model {model}" if model else "")
    engine += f", approval mode {config.approval_mode}"
    token = _token(config)
    tracing_on = tracing.sdk_provider() is not None
    return [
        engine,
        f"backend {server.hub.backend.name}, auth {'bearer token' if token else 'off'}, "
        f"tracing {'on (OTEL_*)' if tracing_on else 'off'}",
    ]


def exposure_warning(config: ServerConfig) -> str | None:
    """The warning for a server any host can reach, without a token, that runs
    every tool call unasked; None when any of the three does not hold."""
    hosts = {t.host for t in (config.grpc, config.http) if t is not None}
    public = sorted(h for h in hosts if not _loopback(h))
    if not public or _token(config) or config.approval_mode != ApprovalMode.ALLOW_ALL:
        return None
    return (
        f"serving on {', '.join(public)} without an auth token while the approval mode is "
        f"{ApprovalMode.ALLOW_ALL}: anyone who reaches the port runs tools on this machine; "
        "set --auth-token-file (or $OMNI_AUTH_TOKEN), or --approval-mode ask"
    )


def _token(config: ServerConfig) -> str | None:
    for transport in (config.grpc, config.http):
        if transport is not None and transport.auth_token:
            return transport.auth_token
    return None


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name: it may resolve anywhere
