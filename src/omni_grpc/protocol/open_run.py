"""``OpenRun``: what a run's stream has opened and not closed, and the messages
that close it.

A run's own stream nests fragments inside requests and ends with ``abort``
when it does not complete. Whoever has to end a stream its producer left
unfinished tracks it here: the hub's run guard (an engine that crashed, was
cut off or returned early) and the engines that relay another producer (a
child process, an upstream server) when that producer fails. The fragments
follow :mod:`omni_grpc.protocol.streaming`; requests and the abort are
counted on the run's own chain only, since a child session's stream is its
engine's business.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from omni_grpc.convert import message_to_dict
from omni_grpc.protocol import builders as b
from omni_grpc.protocol.streaming import OpenFragments
from omni_grpc.vocabulary import USER_ABORT_REASON, Decision, StopReason
from omni_grpc_proto.omni.v1 import omni_pb2

Json = dict[str, Any]
# The run's own chain.
_MAIN: tuple[str, ...] = ()
_CALL_KINDS = ("tool_call", "approval_decision", "tool_call_output")


def _abort_reason(msg: Mapping[str, Any] | omni_pb2.OmniMessage) -> str | None:
    if isinstance(msg, omni_pb2.OmniMessage):
        return msg.abort.reason if msg.abort.HasField("reason") else None
    payload = msg.get("payload")
    reason = payload.get("reason") if isinstance(payload, Mapping) else None
    return reason if isinstance(reason, str) else None


def _is_own_abort(msg: Mapping[str, Any] | omni_pb2.OmniMessage) -> bool:
    if isinstance(msg, omni_pb2.OmniMessage):
        return msg.WhichOneof("payload") == "abort" and not msg.origin
    payload = msg.get("payload")
    return isinstance(payload, Mapping) and payload.get("type") == "abort" and not msg.get("origin")


class OpenRun:
    def __init__(self) -> None:
        # Every chain's fragments (a live tail shows a child's too).
        self.open = OpenFragments()
        self.request_open = False
        self.abort_seen = False
        # The run's completed tool calls still without output, with their
        # decision once made (insertion order is call order).
        self.calls: dict[str, str | None] = {}

    def observe(self, msg: Mapping[str, Any] | omni_pb2.OmniMessage) -> None:
        """Feeds one message of the run, in order (JSON or protobuf)."""
        if self.open.push_message(msg) is not None:
            return
        if isinstance(msg, omni_pb2.OmniMessage):
            if msg.origin:
                return
            kind = msg.WhichOneof("payload")
            if kind in _CALL_KINDS:
                msg = message_to_dict(msg)
        elif msg.get("origin"):
            return
        payload = msg.get("payload") if isinstance(msg, Mapping) else None
        if isinstance(payload, Mapping):
            kind = payload.get("type")
        if kind == "request_begin":
            self.request_open = True
        elif kind == "request_end":
            self.request_open = False
        elif kind == "abort":
            self.abort_seen = True
        elif kind in _CALL_KINDS and isinstance(payload, Mapping):
            self._call(kind, payload)

    def _call(self, kind: str, payload: Mapping[str, Any]) -> None:
        call_id = payload.get("tool_call_id")
        if not isinstance(call_id, str):
            return
        if kind == "tool_call":
            # Only a completed call runs, so only it is owed an output.
            if payload.get("stop_reason", StopReason.COMPLETED) == StopReason.COMPLETED:
                self.calls[call_id] = None
        elif kind == "approval_decision" and call_id in self.calls:
            self.calls[call_id] = str(payload.get("decision", ""))
        elif kind == "tool_call_output":
            self.calls.pop(call_id, None)

    def before_engine_abort(self, msg: Mapping[str, Any] | omni_pb2.OmniMessage) -> list[Json]:
        """When ``msg`` is the producer's own abort of the run's chain, what it
        leaves open, closed as aborted, to go before it: fragments, the
        request, then an output for each call that has none (a relayed
        upstream interrupted inside a turn sends its abort with all three
        open). ``[]`` otherwise, and the abort itself is kept as sent."""
        if self.abort_seen or not _is_own_abort(msg):
            return []
        out = self.closing(StopReason.ABORTED)
        for call_id, decision in self.calls.items():
            call = {"tool_call_id": call_id}
            if decision in (Decision.DENY, Decision.FORBIDDEN):
                out.append(b.denied_tool_output(call, decision))
            elif decision is None:  # nobody decided before the abort
                reason = _abort_reason(msg) or USER_ABORT_REASON
                out.append(b.unanswered_tool_output(call, StopReason.ABORTED, reason))
            else:
                out.append(
                    b.tool_call_output(
                        b.TOOL_ABORTED_PLACEHOLDER, call_id, stop_reason=StopReason.ABORTED
                    )
                )
        self.calls.clear()
        return out

    @property
    def unfinished(self) -> bool:
        """The run's own chain left a fragment open, a stop without its complete
        message, or a request without its end."""
        return self.open.unfinished_in(_MAIN) or self.request_open

    def closing(
        self,
        stop_reason: str,
        *,
        abort_reason: str | None = None,
        error: str | None = None,
        request_status: str | None = None,
        report_error: bool = False,
    ) -> list[Json]:
        """The messages that end the run's own chain, in order: each unfinished
        fragment's (see ``OpenFragments.close_all``, with ``stop_reason``), the
        open request's ``request_end`` (``request_status``, default
        ``stop_reason``, carrying ``error``), then ``abort`` with
        ``abort_reason`` unless the run already ended with one.

        ``report_error``: with no request open, open one so that ``error`` is
        recorded in a ``request_end`` (a producer that failed between requests).
        """
        out = self.open.close_all(stop_reason, origin=_MAIN)
        for item in out:
            # A fragment closed here ends with its complete message, which
            # counts like any other: a tool output answers its call, so
            # ``RunGuard.closing_messages`` does not answer it again (#25: a
            # second tool_call_output when a run was cut between its output's
            # stop and its complete message), and a tool call completed here
            # is owed an output like one the producer completed.
            payload = item.get("payload")
            kind = payload.get("type") if isinstance(payload, Mapping) else None
            if kind in _CALL_KINDS and isinstance(payload, Mapping):
                self._call(str(kind), payload)
        if self.request_open or (report_error and error is not None):
            if not self.request_open:
                out.append(b.request_begin())
            out.append(b.request_end(request_status or stop_reason, error_message=error))
            self.request_open = False
        if abort_reason is not None and not self.abort_seen:
            out.append(b.abort_event(abort_reason))
            self.abort_seen = True
        return out
