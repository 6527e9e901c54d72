"""OpenTelemetry tracing: spans per RPC, HTTP request, run, model request and tool call.

Only ``opentelemetry-api`` is required. Until an SDK tracer provider is
installed nothing is recorded and the server skips its span work entirely;
``omni-grpc serve`` installs one from the standard ``OTEL_*`` variables when
the ``[otel]`` extra is present (``configure_from_env``). Context travels the
W3C way (``traceparent``, through the globally configured propagator, which
honours ``OTEL_PROPAGATORS``): in from gRPC metadata and HTTP headers, into
the run's task, and out on the ``grpc://`` and ``openai`` engines' calls.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterable, Mapping, MutableMapping
from contextvars import ContextVar, Token
from typing import Any, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.propagators.textmap import Getter

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


# ---- propagation --------------------------------------------------------------------


class _PairsGetter(Getter[Iterable[tuple[str, Any]]]):
    """Reads gRPC metadata or ASGI headers: (key, value) pairs, keys lower-case."""

    def get(self, carrier: Iterable[tuple[str, Any]], key: str) -> list[str] | None:
        found = [_text(v) for k, v in carrier if _text(k).lower() == key]
        return found or None

    def keys(self, carrier: Iterable[tuple[str, Any]]) -> list[str]:
        return [_text(k) for k, _ in carrier]


def _text(value: Any) -> str:
    return value.decode("latin-1") if isinstance(value, bytes) else str(value)


_PAIRS = _PairsGetter()


def extract_pairs(pairs: Iterable[tuple[Any, Any]] | None) -> Context:
    """The context a caller sent (``traceparent``...), from metadata or raw headers."""
    return propagate.extract(list(pairs or ()), getter=_PAIRS)


_Carrier = TypeVar("_Carrier", bound=MutableMapping[str, str])

# The run the current task works for: the engine's outgoing calls take the
# open model request as their parent (else the run), whatever task they run in.
_current_run: ContextVar[RunSpans | None] = ContextVar("omni_run_spans", default=None)


class RunSpans:
    """A run's span and the child span of its open model request."""

    def __init__(self, span: trace.Span) -> None:
        self.span = span
        self.request: trace.Span | None = None

    def parent(self) -> trace.Span:
        return self.request if self.request is not None else self.span


def inject(carrier: _Carrier) -> _Carrier:
    """Adds ``traceparent`` (and whatever the propagator carries) for an outgoing call."""
    run = _current_run.get()
    ctx = trace.set_span_in_context(run.parent()) if run is not None else None
    propagate.inject(carrier, context=ctx)
    return carrier


def outgoing_metadata(metadata: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """gRPC call metadata plus the trace context, when there is one to send."""
    extra: dict[str, str] = inject({})
    return metadata + tuple(extra.items()) if extra else metadata


def attach_span(span: trace.Span) -> Token[Context]:
    """Makes ``span`` current in this task until ``reset``."""
    return otel_context.attach(trace.set_span_in_context(span))


def enter_run(spans: RunSpans) -> tuple[Token[RunSpans | None], Token[Context]]:
    """Makes the run current in this task (and in the tasks it starts)."""
    return _current_run.set(spans), otel_context.attach(trace.set_span_in_context(spans.span))


def leave_run(tokens: tuple[Token[RunSpans | None], Token[Context]]) -> None:
    run_token, ctx_token = tokens
    reset(run_token)
    reset(ctx_token)


def reset(token: Token[Any]) -> None:
    """Undoes a context change, quietly when finalization happens in another context
    (an async generator closed by the loop rather than by its task)."""
    with contextlib.suppress(ValueError, RuntimeError):
        token.var.reset(token)
