"""OpenTelemetry tracing: spans per RPC, HTTP request, run, model request and tool call.

Only ``opentelemetry-api`` is required. Until an SDK tracer provider is
installed nothing is recorded and the server skips its span work entirely;
``omni-grpc serve`` installs one from the standard ``OTEL_*`` variables when
the ``[otel]`` extra is present (``configure_from_env``). Context travels the
W3C way (``traceparent``); that part is ``omni_grpc.propagation``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

from opentelemetry import trace

# Propagation is the ground floor's (``omni_grpc.propagation``); its names
# are kept here for the server's telemetry and for existing imports.
from omni_grpc.propagation import (
    RunSpans,
    attach_span,
    enter_run,
    extract_pairs,
    inject,
    leave_run,
    outgoing_metadata,
    reset,
)

__all__ = [
    "DEFAULT_SERVICE_NAME",
    "TRACER_NAME",
    "RunSpans",
    "attach_span",
    "configure_from_env",
    "enter_run",
    "extract_pairs",
    "inject",
    "leave_run",
    "outgoing_metadata",
    "reset",
    "sdk_provider",
    "shutdown",
]

log = logging.getLogger(__name__)

TRACER_NAME = "omni_grpc"
DEFAULT_SERVICE_NAME = "omni-grpc"


def sdk_provider(provider: trace.TracerProvider | None = None) -> trace.TracerProvider | None:
    """``provider`` (or the global one) if it records spans, else None."""
    provider = provider or trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        return None
    return provider


def configure_from_env(environ: Mapping[str, str] | None = None) -> bool:
    """Installs an SDK tracer provider as the standard variables ask; True if one is on.

    Tracing is on when ``OTEL_TRACES_EXPORTER`` names an exporter (``otlp``,
    ``console``), or when an OTLP endpoint is set and the exporter is not
    ``none``; ``OTEL_SDK_DISABLED=true`` turns it off. A provider installed
    before (say, by ``opentelemetry-instrument``) is kept as it is.
    """
    env = os.environ if environ is None else environ
    if sdk_provider() is not None:
        return True
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporters = [
        e.strip().lower() for e in env.get("OTEL_TRACES_EXPORTER", "").split(",") if e.strip()
    ]
    endpoint = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    if not exporters and endpoint:
        exporters = ["otlp"]
    exporters = [e for e in exporters if e != "none"]
    if not exporters:
        return False
    try:
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
    except ImportError:
        log.warning(
            "OTEL_* asks for tracing, but the SDK is missing: pip install 'omni-grpc[otel]'"
        )
        return False
    # Resource.create reads OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES.
    resource = Resource.create(
        {} if env.get("OTEL_SERVICE_NAME") else {SERVICE_NAME: DEFAULT_SERVICE_NAME}
    )
    provider = TracerProvider(resource=resource)  # reads OTEL_TRACES_SAMPLER
    for name in exporters:
        exporter: SpanExporter
        if name == "console":
            from opentelemetry.sdk.trace.export import ConsoleSpanExporter

            exporter = ConsoleSpanExporter()
        elif name == "otlp":
            exporter = _otlp_exporter(env)
        else:
            raise ValueError(
                f"OTEL_TRACES_EXPORTER: unknown exporter {name!r} (otlp, console, none)"
            )
        provider.add_span_processor(BatchSpanProcessor(exporter))  # reads OTEL_BSP_*
    trace.set_tracer_provider(provider)
    return True


def _otlp_exporter(env: Mapping[str, str]) -> Any:
    protocol = (
        env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    ).strip()
    # Each exporter reads its endpoint, headers, timeout and TLS settings itself.
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter()
    if protocol in ("http/protobuf", "http"):
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
            OTLPSpanExporter as HttpExporter,
        )

        return HttpExporter()
    raise ValueError(f"OTEL_EXPORTER_OTLP_PROTOCOL: {protocol!r} is not grpc or http/protobuf")


def shutdown() -> None:
    """Flushes and stops the global SDK provider, if one was installed."""
    provider = sdk_provider()
    closer = getattr(provider, "shutdown", None)
    if closer is not None:
        closer()
