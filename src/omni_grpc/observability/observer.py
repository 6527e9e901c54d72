"""The server's way of hearing the hub: ``HubTelemetry``.

The hub calls the observer interface of ``runtime.observer`` (whose bases do
nothing); ``HubTelemetry`` turns the calls into Prometheus metrics,
OpenTelemetry spans and the log context. Everything it learns about a run it reads from the
run's own messages (``request_begin``/``request_end``, ``tool_call``,
``approval_decision``, ``abort``), so it works for every engine, and the
engines stay unaware of it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from opentelemetry import trace

from omni_grpc.engines.base import (
    AbortSignal,
    ApprovalUnanswered,
    ApproveFn,
    Decision,
    JsonObject,
)
from omni_grpc.observability import logs, tracing
from omni_grpc.observability.event_log import ObservedEventLog
from omni_grpc.observability.metrics import (
    ABORT_KINDS,
    DECISIONS,
    OTHER,
    REQUEST_OUTCOMES,
    RUN_STATUSES,
    UNANSWERED,
    ServerMetrics,
    bounded,
)
from omni_grpc.runtime.event_log import EventLog
from omni_grpc.runtime.observer import HubObserver, RunObservation
from omni_grpc.trace import TraceWriter
from omni_grpc.vocabulary import AbortKind, RunOutcome, StopReason
from omni_grpc_proto.omni.v1 import omni_pb2

# Enum numbers -> the protocol's JSON names ("completed", "allow", ...).
_STOP_REASONS = {
    number: name.removeprefix("STOP_REASON_").lower()
    for name, number in omni_pb2.StopReason.items()
}
_DECISIONS = {
    number: name.removeprefix("DECISION_").lower() for name, number in omni_pb2.Decision.items()
}

__all__ = ["ABORT_KINDS", "HubObserver", "HubTelemetry", "RunObservation"]

log = logging.getLogger(__name__)


class _MeteredTraceWriter(TraceWriter):
    def __init__(self, path: Path, metrics: ServerMetrics) -> None:
        super().__init__(path)
        self._metrics = metrics

    def append_line(
        self, record: bytes, msg: omni_pb2.OmniMessage | None = None, *, number: int | None = None
    ) -> None:
        try:
            super().append_line(record, msg, number=number)
        except (OSError, ValueError):
            self._metrics.trace_errors.inc()
            raise
        # The newline, and a healing one before it after a torn tail, are not
        # counted: this is the records' size.
        self._metrics.trace_bytes.inc(len(record) + 1)


class HubTelemetry(HubObserver):
    """Metrics (when ``metrics`` is given), spans (when ``tracer`` is) and the log
    context, for every run."""

    def __init__(
        self,
        metrics: ServerMetrics | None,
        tracer: trace.Tracer | None,
        engine_name: str,
        max_attempts: int | None = None,
    ) -> None:
        self.metrics = metrics
        self.tracer = tracer
        self.engine_name = engine_name
        self.max_attempts = max_attempts

    def event_log(self, log: EventLog) -> EventLog:
        if self.metrics is None:
            return log
        observed = ObservedEventLog(log, self.metrics)
        self.metrics.track_log(observed)
        return observed

    def trace_writer(self, path: Path) -> TraceWriter:
        if self.metrics is None:
            return TraceWriter(path)
        return _MeteredTraceWriter(path, self.metrics)

    def run_started(
        self, session_id: str, abort: AbortSignal, inputs: Sequence[omni_pb2.OmniMessage]
    ) -> RunObservation:
        return _ObservedRun(self, session_id, abort, len(inputs))


class _ObservedRun(RunObservation):
    def __init__(
        self, telemetry: HubTelemetry, session_id: str, abort: AbortSignal, inputs: int
    ) -> None:
        self.t = telemetry
        self.m = telemetry.metrics
        self.abort = abort
        self.run_id = logs.new_run_id()
        self.started = time.monotonic()
        self._inputs_left = inputs
        self._engine_spoke = False
        self._request_started: float | None = None
        # The kind of the run's closing abort, once it is emitted.
        self._abort_kind: AbortKind | None = None
        # tool_call_id -> when its approval_request went out
        self._asks: dict[str, float] = {}
        self._tools: dict[str, trace.Span] = {}
        self._log_tokens = logs.enter_run(session_id, self.run_id)
        self.spans: tracing.RunSpans | None = None
        self._trace_tokens: Any = None
        if telemetry.tracer is not None:
            span = telemetry.tracer.start_span(
                "omni.run",
                kind=trace.SpanKind.INTERNAL,
                attributes={
                    "omni.session_id": session_id,
                    "omni.run_id": self.run_id,
                    "omni.engine": telemetry.engine_name,
                },
            )
            self.spans = tracing.RunSpans(span)
            self._trace_tokens = tracing.enter_run(self.spans)
        if self.m is not None:
            self.m.runs_started.inc()
            self.m.runs_in_progress.inc()

    # ---- messages -------------------------------------------------------------------

    def message(
        self, msg: omni_pb2.OmniMessage, arm: str, abort_kind: AbortKind | None = None
    ) -> None:
        if self._inputs_left:
            self._inputs_left -= 1  # the run's input, published before the engine starts
            return
        if not self._engine_spoke:
            self._engine_spoke = True
            if self.m is not None:
                self.m.run_first_event_seconds.observe(time.monotonic() - self.started)
        if msg.origin:
            return  # a child session's requests and tools are its own
        if arm == "abort":
            self._abort_kind = abort_kind or AbortKind.ENGINE_FAILURE
            return
        handler = _HANDLERS.get(arm)
        if handler is not None:
            handler(self, msg)

    def _request_begin(self, msg: omni_pb2.OmniMessage) -> None:
        self._request_started = time.monotonic()
        if self.spans is not None and self.t.tracer is not None:
            self._end_request_span("superseded")
            ctx = trace.set_span_in_context(self.spans.span)
            self.spans.request = self.t.tracer.start_span(
                "omni.model_request", context=ctx, attributes={"omni.engine": self.t.engine_name}
            )

    def _request_end(self, msg: omni_pb2.OmniMessage) -> None:
        end = msg.request_end
        outcome = bounded(_STOP_REASONS.get(end.status, OTHER), REQUEST_OUTCOMES)
        if self.m is not None:
            if self._request_started is not None:
                self.m.engine_request_seconds.labels(self.t.engine_name, outcome).observe(
                    time.monotonic() - self._request_started
                )
            if end.HasField("retry_in_ms"):
                self.m.engine_retries.labels(self.t.engine_name, outcome).inc()
        if end.HasField("retry_in_ms"):
            # As `run` shows it: the wait and the attempt that comes next.
            upcoming = (end.attempt if end.HasField("attempt") else 0) + 1
            of = f"/{self.t.max_attempts}" if self.t.max_attempts else ""
            log.warning(
                "engine %s: request %s (%s); retrying in %g s, attempt %d%s",
                self.t.engine_name, outcome, end.error_message or "no message",
                end.retry_in_ms / 1000, upcoming, of,
            )  # fmt: skip
        self._request_started = None
        self._end_request_span(outcome, attempt=end.attempt if end.HasField("attempt") else None)

    def _end_request_span(self, outcome: str, attempt: int | None = None) -> None:
        if self.spans is None or self.spans.request is None:
            return
        span, self.spans.request = self.spans.request, None
        span.set_attribute("omni.outcome", outcome)
        if attempt is not None:
            span.set_attribute("omni.attempt", attempt)
        if outcome != StopReason.COMPLETED:
            span.set_status(trace.StatusCode.ERROR, outcome)
        span.end()

    def _tool_call(self, msg: omni_pb2.OmniMessage) -> None:
        if self.spans is None or self.t.tracer is None:
            return
        call = msg.tool_call
        ctx = trace.set_span_in_context(self.spans.span)
        self._tools[call.tool_call_id] = self.t.tracer.start_span(
            "omni.tool_call",
            context=ctx,
            attributes={"omni.tool.name": call.name, "omni.tool_call_id": call.tool_call_id},
        )

    def _tool_call_output(self, msg: omni_pb2.OmniMessage) -> None:
        output = msg.tool_call_output
        span = self._tools.pop(output.tool_call_id, None)
        if span is not None:
            stop = _STOP_REASONS.get(output.stop_reason, OTHER)
            span.set_attribute("omni.outcome", stop)
            if stop != StopReason.COMPLETED:
                span.set_status(trace.StatusCode.ERROR, stop)
            span.end()

    def _approval_decision(self, msg: omni_pb2.OmniMessage) -> None:
        decision = msg.approval_decision
        span = self._tools.get(decision.tool_call_id)
        if span is not None:
            span.set_attribute("omni.approval", _DECISIONS.get(decision.decision, OTHER))

    # ---- approvals ------------------------------------------------------------------

    def approver(self, approve: ApproveFn) -> ApproveFn:
        if self.m is None:
            return approve
        metrics = self.m

        async def timed(tool_call: JsonObject) -> Decision:
            # What became of the ask: a decision, or how it ended without one
            # (an abort or an expired wait is nobody's deny).
            ended = OTHER
            try:
                decision = await approve(tool_call)
                ended = bounded(decision, DECISIONS)
                return decision
            except ApprovalUnanswered as exc:
                ended = bounded(exc.stop_reason, UNANSWERED)
                raise
            except asyncio.CancelledError:
                ended = StopReason.ABORTED  # the run's task was cancelled mid-wait
                raise
            finally:
                call_id = str(tool_call.get("payload", {}).get("tool_call_id", ""))
                asked = self._asks.pop(call_id, None)
                if asked is not None:
                    metrics.approvals_waiting.dec()
                    metrics.approval_wait_seconds.labels(ended).observe(time.monotonic() - asked)

        return timed

    def asked(self, tool_call: JsonObject) -> None:
        if self.m is None:
            return
        call_id = str(tool_call.get("payload", {}).get("tool_call_id", ""))
        if call_id not in self._asks:
            self._asks[call_id] = time.monotonic()
            self.m.approvals_waiting.inc()

    # ---- the end --------------------------------------------------------------------

    def finished(self, failed: bool = False) -> None:
        kind = self._abort_kind
        if failed and kind is None:
            kind = AbortKind.SERVER_FAILURE  # the hub stopped it before an abort got out
        if kind is None:
            status = RunOutcome.COMPLETED
        elif failed or kind.is_failure:
            status = RunOutcome.FAILED
        else:
            status = RunOutcome.ABORTED
        if self.m is not None:
            self.m.runs_in_progress.dec()
            self.m.runs_finished.labels(bounded(status, RUN_STATUSES)).inc()
            self.m.run_seconds.labels(status).observe(time.monotonic() - self.started)
            if kind is not None:
                self.m.aborts.labels(bounded(kind, ABORT_KINDS)).inc()
            # Asks still open when the run ended no longer wait.
            for _ in self._asks:
                self.m.approvals_waiting.dec()
            self._asks.clear()
        if self.spans is not None:
            self._end_request_span(
                (StopReason.ABORTED if status is RunOutcome.ABORTED else StopReason.FAILED).value
            )
            for span in self._tools.values():
                span.set_status(trace.StatusCode.ERROR, "the run ended first")
                span.end()
            self._tools.clear()
            run = self.spans.span
            run.set_attribute("omni.status", status.value)
            if kind is not None:
                run.set_attribute("omni.abort_kind", kind.value)
            if status is RunOutcome.FAILED:
                run.set_status(trace.StatusCode.ERROR, "the run ended with an abort")
            run.end()
            tracing.leave_run(self._trace_tokens)
        logs.leave_run(self._log_tokens)


_HANDLERS: dict[str, Callable[[_ObservedRun, omni_pb2.OmniMessage], None]] = {
    "request_begin": _ObservedRun._request_begin,
    "request_end": _ObservedRun._request_end,
    "tool_call": _ObservedRun._tool_call,
    "tool_call_output": _ObservedRun._tool_call_output,
    "approval_decision": _ObservedRun._approval_decision,
}
