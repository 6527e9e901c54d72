"""What the runtime reports about its work: the observer it calls.

The hub calls a ``HubObserver`` at a few points: when it opens a session's
event log or trace writer, when a run starts, for each message the run
emits, and when the run ends. These bases do nothing and cost nothing (the
default); ``observability.observer.HubTelemetry`` turns the calls into
metrics, spans and the log context. The interface lives here, at the
runtime's floor, so the runtime never imports the server's observability.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from omni_grpc.engines.base import AbortSignal, ApproveFn, JsonObject
from omni_grpc.runtime.event_log import EventLog
from omni_grpc.trace import TraceWriter
from omni_grpc.vocabulary import AbortKind
from omni_grpc_proto.omni.v1 import omni_pb2


class RunObservation:
    """One run, as the hub reports it. This base records nothing."""

    def message(
        self, msg: omni_pb2.OmniMessage, arm: str, abort_kind: AbortKind | None = None
    ) -> None:
        """Every message the run emits, in order (input first); an ``abort`` comes
        with the kind the hub gave it."""

    def approver(self, approve: ApproveFn) -> ApproveFn:
        """Wraps the run's approve callback (to time the asks)."""
        return approve

    def asked(self, tool_call: JsonObject) -> None:
        """An approval_request went out for ``tool_call``."""

    def finished(self, failed: bool = False) -> None:
        """The run is over (called once, in the run's own task); ``failed``: the hub
        stopped it (its trace could not be written, or the hub failed)."""


class HubObserver:
    """The hub's reporting points. This base reports nothing and costs nothing."""

    def event_log(self, log: EventLog) -> EventLog:
        return log

    def trace_writer(self, path: Path) -> TraceWriter:
        return TraceWriter(path)

    def run_started(
        self, session_id: str, abort: AbortSignal, inputs: Sequence[omni_pb2.OmniMessage]
    ) -> RunObservation:
        return _NOTHING


_NOTHING = RunObservation()
