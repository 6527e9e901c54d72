"""The server's Prometheus metrics: one registry per server, every instrument named once.

Each ``OmniServer`` gets its own ``CollectorRegistry`` (so two servers in one
process, as in the tests, count separately); ``/metrics`` renders it. The gRPC
series use the grpc-ecosystem interceptors' names and labels, so existing
dashboards work unchanged; everything else is ``omni_*``.

No label takes a value from a client: gRPC methods are the registered ones,
HTTP routes are route templates, and statuses, outcomes and kinds come from
fixed vocabularies (anything else is counted as ``other``). Sessions are
never a label; per-session quantities are histograms over sessions.
"""

from __future__ import annotations

import platform
import weakref
from collections.abc import Iterable, Iterator
from typing import Protocol

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeHistogramMetricFamily,
    GaugeMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from omni_grpc.vocabulary import AbortKind, Decision, RunOutcome, StopReason

GRPC_LABELS = ("grpc_type", "grpc_service", "grpc_method")

# Seconds: from sub-millisecond hub work to model requests and approvals that
# take minutes.
LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
WAIT_BUCKETS = (0.1, 0.5, 1, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)
SUBSCRIBER_BUCKETS = (0, 1, 2, 4, 8, 16, 32, 64, 128)

RUN_STATUSES: frozenset[str] = frozenset(RunOutcome)
# request_end stop reasons (the protocol's StopReason names).
REQUEST_OUTCOMES: frozenset[str] = frozenset(StopReason)
DECISIONS: frozenset[str] = frozenset(Decision)
# How an approval wait ends with no decision: the stop reasons of the call's
# output (the run was aborted meanwhile, or the wait ran out).
UNANSWERED: frozenset[str] = frozenset({StopReason.ABORTED, StopReason.TIMEOUT})
ABORT_KINDS: frozenset[str] = frozenset(AbortKind)
OTHER = "other"


def bounded(value: str, allowed: frozenset[str]) -> str:
    """``value`` if it is in the vocabulary, else ``other``: labels stay bounded."""
    return value if value in allowed else OTHER


def build_labels() -> tuple[str, str, str]:
    """(version, python, native_codec) for ``omni_build_info``."""
    from omni_grpc import __version__
    from omni_grpc.convert._native import NATIVE

    return __version__, platform.python_version(), "yes" if NATIVE is not None else "no"


class LogStats(Protocol):
    """What the scrape reads from a live event log (the hub's observed wrapper)."""

    @property
    def subscriber_count(self) -> int: ...

    def buffer_stats(self) -> tuple[int, int] | None:
        """(events, UTF-16 units) buffered here, or None when the backend does not say."""
        ...


class ServerMetrics:
    """Every instrument of one server, registered on ``self.registry``."""

    def __init__(self, registry: CollectorRegistry | None = None, *, process: bool = True) -> None:
        self.registry = r = registry or CollectorRegistry()
        if process:
            ProcessCollector(registry=r)
            PlatformCollector(registry=r)

        # ---- gRPC, as the grpc-ecosystem Prometheus interceptors name them ----------
        self.grpc_started = Counter(
            "grpc_server_started", "RPCs started on the server.", GRPC_LABELS, registry=r
        )
        self.grpc_handled = Counter(
            "grpc_server_handled",
            "RPCs completed on the server, regardless of success or failure.",
            (*GRPC_LABELS, "grpc_code"),
            registry=r,
        )
        self.grpc_handling_seconds = Histogram(
            "grpc_server_handling_seconds",
            "Response latency (seconds) of gRPC that had been application-level handled "
            "by the server.",
            GRPC_LABELS,
            registry=r,
        )
        # Messages are tallied per method (see Tally) and read at scrape time.
        self.grpc_messages: dict[tuple[str, str, str], MessageTally] = {}

        # ---- HTTP -------------------------------------------------------------------
        self.http_requests = Counter(
            "omni_http_requests",
            "HTTP requests answered, by route template, method and status code.",
            ("route", "method", "status"),
            registry=r,
        )
        self.http_request_seconds = Histogram(
            "omni_http_request_duration_seconds",
            "Seconds from an HTTP request's arrival to the end of its response "
            "(the whole stream for SSE).",
            ("route", "method"),
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.sse_streams_open = Gauge(
            "omni_http_sse_streams_open",
            "Server-Sent Events responses currently streaming, by route template.",
            ("route",),
            registry=r,
        )

        # ---- runs and approvals -----------------------------------------------------
        self.runs_started = Counter("omni_runs_started", "Runs (tasks) started.", registry=r)
        self.runs_finished = Counter(
            "omni_runs_finished",
            "Runs finished, by final status (completed, aborted, failed).",
            ("status",),
            registry=r,
        )
        self.runs_in_progress = Gauge(
            "omni_runs_in_progress", "Runs currently in progress.", registry=r
        )
        self.run_seconds = Histogram(
            "omni_run_duration_seconds",
            "Seconds a run took, by final status.",
            ("status",),
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.run_first_event_seconds = Histogram(
            "omni_run_first_event_seconds",
            "Seconds from a run's start to the engine's first message.",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.approvals_waiting = Gauge(
            "omni_approvals_waiting",
            "Tool calls waiting for an approval decision (approval mode ask).",
            registry=r,
        )
        self.approval_wait_seconds = Histogram(
            "omni_approval_wait_seconds",
            "Seconds a tool call waited for its approval decision, by decision "
            "(allow, deny, forbidden), or aborted / timeout when none came.",
            ("decision",),
            buckets=WAIT_BUCKETS,
            registry=r,
        )
        self.aborts = Counter(
            "omni_aborts",
            "Runs ended by an abort, by kind: user, client_gone, shutdown, engine_failure, "
            "server_failure, replica_lost.",
            ("kind",),
            registry=r,
        )

        # ---- events and subscribers -------------------------------------------------
        self.events_published = Tally()
        self.events_delivered = Tally()
        self.subscriber_cutoffs = Counter(
            "omni_subscriber_cutoffs",
            "Subscribers that fell behind the replay buffer and were told resync_required.",
            registry=r,
        )
        self.replays = Counter(
            "omni_replays",
            "Attaches that resumed after an event id: hit (replayed from the buffer) or "
            "miss (told resync_required).",
            ("result",),
            registry=r,
        )

        # ---- traces -----------------------------------------------------------------
        self.trace_bytes = Counter(
            "omni_trace_written_bytes", "Bytes appended to session traces.", registry=r
        )
        self.trace_errors = Counter(
            "omni_trace_write_errors", "Trace appends that failed.", registry=r
        )

        # ---- engines ----------------------------------------------------------------
        self.engine_request_seconds = Histogram(
            "omni_engine_request_duration_seconds",
            "Seconds from an engine's request_begin to its request_end, by engine and "
            "outcome (the request_end stop reason).",
            ("engine", "outcome"),
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.engine_retries = Counter(
            "omni_engine_request_retries",
            "Engine requests that failed and were retried, by engine and failure.",
            ("engine", "reason"),
            registry=r,
        )

        # ---- the build ------------------------------------------------------------
        self.build_info = Gauge(
            "omni_build_info",
            "Always 1; the labels say which omni-grpc runs: its version, the Python "
            "version and whether the native codec is in use.",
            ("version", "python", "native_codec"),
            registry=r,
        )
        self.build_info.labels(*build_labels()).set(1)

        # Every outcome shows from the start, so rate() sees the first increment.
        for status in sorted(RUN_STATUSES):
            self.runs_finished.labels(status)
        for result in ("hit", "miss"):
            self.replays.labels(result)
        for kind in sorted(ABORT_KINDS):
            self.aborts.labels(kind)
        for decision in sorted(DECISIONS | UNANSWERED):
            self.approval_wait_seconds.labels(decision)

        self._logs: weakref.WeakSet[LogStats] = weakref.WeakSet()
        r.register(_EventLogCollector(self._logs))
        r.register(_TallyCollector(self))

    def grpc_message_tally(self, labels: tuple[str, str, str]) -> MessageTally:
        tally = self.grpc_messages.get(labels)
        if tally is None:
            tally = self.grpc_messages[labels] = MessageTally()
        return tally

    def track_log(self, log: LogStats) -> None:
        """Includes ``log`` in the event-log gauges while it is alive."""
        self._logs.add(log)


class Tally:
    """A counter for the per-event path: a plain integer the event loop adds to,
    read by the scrape. ``Counter.inc`` takes a lock and costs about a
    microsecond, which several times per event is a few percent of a stream's
    rate; the tallied series are only ever incremented on the event loop
    thread, and reading an int is atomic."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0


class MessageTally:
    """Messages of one gRPC method, both ways."""

    __slots__ = ("received", "sent")

    def __init__(self) -> None:
        self.received = 0
        self.sent = 0


class _TallyCollector(Collector):
    def __init__(self, metrics: ServerMetrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        m = self._metrics
        received = CounterMetricFamily(
            "grpc_server_msg_received",
            "RPC stream messages received on the server.",
            labels=GRPC_LABELS,
        )
        sent = CounterMetricFamily(
            "grpc_server_msg_sent", "gRPC stream messages sent by the server.", labels=GRPC_LABELS
        )
        for labels, tally in list(m.grpc_messages.items()):
            received.add_metric(labels, tally.received)
            sent.add_metric(labels, tally.sent)
        published = CounterMetricFamily(
            "omni_events_published", "Events published to session event logs."
        )
        published.add_metric([], m.events_published.value)
        delivered = CounterMetricFamily(
            "omni_events_delivered", "Events handed to subscribers (one per subscriber per event)."
        )
        delivered.add_metric([], m.events_delivered.value)
        yield from (received, sent, published, delivered)


class _EventLogCollector(Collector):
    """Scrape-time view of the live event logs: nothing is counted per event."""

    def __init__(self, logs: Iterable[LogStats]) -> None:
        self._logs = logs

    def collect(self) -> Iterator[Metric]:
        logs = list(self._logs)
        events = GaugeMetricFamily(
            "omni_event_log_buffered_events", "Events held in replay buffers, all sessions."
        )
        size = GaugeMetricFamily(
            "omni_event_log_buffered_bytes",
            "Size of the replay buffers, all sessions, counted as the reference counts "
            "(UTF-16 code units of the JSON text).",
        )
        count = GaugeMetricFamily("omni_event_logs", "Session event logs held in memory.")
        total_events = total_bytes = 0
        buckets = [0] * len(SUBSCRIBER_BUCKETS)
        total_subscribers = 0
        for log in logs:
            stats = log.buffer_stats()
            if stats is not None:
                total_events += stats[0]
                total_bytes += stats[1]
            n = log.subscriber_count
            total_subscribers += n
            for i, bound in enumerate(SUBSCRIBER_BUCKETS):
                if n <= bound:
                    buckets[i] += 1
        events.add_metric([], total_events)
        size.add_metric([], total_bytes)
        count.add_metric([], len(logs))
        subscribers = GaugeHistogramMetricFamily(
            "omni_session_subscribers",
            "Sessions by their number of open subscriptions (a distribution over the "
            "sessions whose event log is in memory).",
        )
        subscribers.add_metric(
            [],
            [(str(b), float(c)) for b, c in zip(SUBSCRIBER_BUCKETS, buckets, strict=True)]
            + [("+Inf", float(len(logs)))],
            float(total_subscribers),
        )
        yield from (events, size, count, subscribers)
