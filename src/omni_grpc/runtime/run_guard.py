"""Keeps a run's stream well-formed when its engine does not finish it.

Engines close their own fragments and requests and yield ``abort`` last. When
one crashes, yields garbage, ignores an abort past the grace period or returns
with its stream unfinished, the hub asks this guard for the messages that
close what is still open: each open fragment's ``stop`` and complete message,
``request_end``, then ``abort``. The bookkeeping is
:class:`omni_grpc.protocol.open_run.OpenRun`, over the fragment rules every
reader of the stream applies, so what the guard closes is exactly what a
client's aggregator still holds open, images included.
"""

from __future__ import annotations

from omni_grpc.engines.base import JsonObject
from omni_grpc.protocol.open_run import OpenRun
from omni_grpc.vocabulary import StopReason


class RunGuard(OpenRun):
    def fragments(self) -> list[JsonObject]:
        """Each open fragment as a synthetic ``start`` carrying what has streamed
        so far, in opening order (the reference live tail's ``fragments``)."""
        return self.open.snapshots()

    def closing_messages(
        self, *, aborted: bool, reason: str, error: str | None
    ) -> list[JsonObject]:
        """What closes the run: fragment stops and completes, request_end, abort."""
        stop_reason = StopReason.ABORTED if aborted else StopReason.FAILED
        return self.closing(stop_reason, abort_reason=reason, error=error)
