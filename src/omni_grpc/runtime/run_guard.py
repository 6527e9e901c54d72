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
from omni_grpc.protocol.builders import denied_tool_output, unanswered_tool_output
from omni_grpc.protocol.open_run import OpenRun
from omni_grpc.trace.resume import placeholder_output
from omni_grpc.vocabulary import Decision, StopReason


class RunGuard(OpenRun):
    def fragments(self) -> list[JsonObject]:
        """Each open fragment as a synthetic ``start`` carrying what has streamed
        so far, in opening order (the reference live tail's ``fragments``)."""
        return self.open.snapshots()

    def closing_messages(
        self, *, aborted: bool, reason: str, error: str | None, answer_calls: bool = False
    ) -> list[JsonObject]:
        """What closes the run: fragment stops and completes, request_end, abort.

        ``answer_calls``: the run's producer is gone (its replica was lost), so
        each completed call still without an output gets one before the abort,
        as the reference's closing records have it (``trace/resume.py``): the
        unanswered output for a call that waited on its approval, the denied
        one for a call refused, the process-exit placeholder for a call that
        was running."""
        stop_reason = StopReason.ABORTED if aborted else StopReason.FAILED
        out = self.closing(stop_reason, error=error)
        if answer_calls:
            for call_id, decision in self.calls.items():
                call = {"tool_call_id": call_id}
                if decision in (Decision.DENY, Decision.FORBIDDEN):
                    out.append(denied_tool_output(call, decision))
                elif decision is None:
                    out.append(unanswered_tool_output(call, StopReason.ABORTED, reason))
                else:
                    out.append(placeholder_output(call_id))
            self.calls.clear()
        return out + self.closing(stop_reason, abort_reason=reason)
