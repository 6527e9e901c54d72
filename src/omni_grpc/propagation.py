"""Trace context propagation: the W3C ``traceparent`` in and out of a call.

The ground floor of the package (opentelemetry-api only), so an engine and
the client can send the trace context without importing the server's
observability. Context travels through the globally configured propagator
(which honours ``OTEL_PROPAGATORS``): in from gRPC metadata and HTTP headers,
into the run's task, and out on the ``grpc://`` and ``openai`` engines' calls.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, MutableMapping
from contextvars import ContextVar, Token
from typing import Any, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.propagators.textmap import Getter


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
