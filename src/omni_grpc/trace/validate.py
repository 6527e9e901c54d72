"""Protocol checks over a message sequence (a trace or a recorded stream).

Reports, without changing anything:

* the streaming discipline: ``start -> delta* -> stop`` per fragment, the complete
  message immediately after the ``stop``, and the joined deltas equal to it;
* ``tool_call``/``tool_call_output`` pairing and approvals in between;
* ``request_begin``/``request_end`` pairing;
* partials or origin-tagged messages in a trace;
* unknown payload kinds and enum values (warnings: the codec keeps them intact).

Order is checked per origin chain: a subagent's messages may interleave with
the parent's, but each chain obeys the discipline on its own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from omni_grpc.convert import message_to_dict
from omni_grpc.protocol.guards import KNOWN_KINDS, PARTIAL_KINDS
from omni_grpc.trace.records import TraceRecord
from omni_grpc.vocabulary import Decision, EventType, StopReason

Severity = Literal["error", "warning"]
Report = Callable[[Severity, str, str], None]

_COMPLETE_OF = {
    "partial_text": "text",
    "partial_thinking": "thinking",
    "partial_tool_call": "tool_call",
    "partial_tool_call_output": "tool_call_output",
}
_CONTENT_KEY = {
    "partial_text": "text",
    "partial_thinking": "thinking",
    "partial_tool_call": "arguments",
    "partial_tool_call_output": "output",
}
_STOP_REASONS = frozenset(StopReason)
_ENUMS: dict[str, frozenset[str]] = {
    "stop_reason": _STOP_REASONS,
    "status": _STOP_REASONS,
    "role": frozenset({"user", "assistant"}),
    "event_type": frozenset(EventType),
    "decision": frozenset(Decision),
    "sender": frozenset({"user", "parent_agent", "harness", "server"}),
}


@dataclass(frozen=True, slots=True)
class Issue:
    line: int
    severity: Severity
    code: str
    message: str


@dataclass
class _Fragment:
    kind: str
    start_line: int
    pieces: list[str] = field(default_factory=list)
    name: str = ""
    tool_call_id: str = ""
    images: list[Any] = field(default_factory=list)
    stop_reason: str = "completed"

    def add(self, payload: Mapping[str, Any]) -> None:
        content = payload.get(_CONTENT_KEY[self.kind])
        if isinstance(content, str):
            self.pieces.append(content)
        if isinstance(payload.get("name"), str) and payload["name"]:
            self.name = payload["name"]
        if isinstance(payload.get("tool_call_id"), str):
            self.tool_call_id = payload["tool_call_id"]
        if isinstance(payload.get("images"), list) and payload["images"]:
            self.images = payload["images"]
        if isinstance(payload.get("stop_reason"), str):
            self.stop_reason = payload["stop_reason"]

    def expected(self) -> dict[str, Any]:
        """The fields the complete message must have."""
        joined = "".join(self.pieces)
        out: dict[str, Any] = {_CONTENT_KEY[self.kind]: joined, "stop_reason": self.stop_reason}
        if self.kind == "partial_tool_call":
            out |= {"name": self.name, "tool_call_id": self.tool_call_id}
        elif self.kind == "partial_tool_call_output":
            out |= {"tool_call_id": self.tool_call_id, "images": self.images}
        return out


@dataclass
class _Lane:
    """Per-origin-chain state."""

    open: dict[str, _Fragment] = field(default_factory=dict)
    awaiting: tuple[int, _Fragment] | None = None  # (stop line, fragment)
    request_line: int | None = None
    calls: dict[str, int] = field(default_factory=dict)  # call id -> line, no output yet
    seen_calls: dict[str, int] = field(default_factory=dict)  # call id -> line of its call


class TraceValidator:
    """Feed messages in order with :meth:`check`, then call :meth:`finish`.

    ``trace=True`` applies the trace rules (no partials, no origin, session_meta
    first); ``None`` decides from the first message: a trace starts with a
    session_meta that has no origin.
    """

    def __init__(self, *, trace: bool | None = None) -> None:
        self.trace = trace
        self.count = 0
        self._lanes: dict[tuple[str, ...], _Lane] = {}

    def check(self, line: int, msg: Mapping[str, Any]) -> list[Issue]:
        issues: list[Issue] = []
        payload = msg.get("payload")
        payload = payload if isinstance(payload, Mapping) else {}
        meta = msg.get("type") == "session_meta"
        kind = "session_meta" if meta else str(payload.get("type", ""))
        origin = tuple(str(o) for o in msg.get("origin") or ())

        def report(severity: Severity, code: str, text: str) -> None:
            issues.append(Issue(line, severity, code, text))

        self.count += 1
        if self.trace is None:
            self.trace = meta and not origin
        if self.trace:
            if self.count == 1 and not meta:
                report("error", "trace-start", "a trace starts with session_meta")
            if kind in PARTIAL_KINDS:
                report("error", "partial-in-trace", f"{kind} in a trace (traces hold no partials)")
            if origin:
                report("error", "origin-in-trace", "origin-tagged message in a trace")

        if kind not in KNOWN_KINDS:
            report("warning", "unknown-kind", f"unknown payload kind {kind!r}")
        elif not meta:
            for key, allowed in _ENUMS.items():
                value = payload.get(key)
                if isinstance(value, str) and value not in allowed:
                    report("warning", "unknown-value", f"unknown {key} {value!r} in {kind}")

        lane = self._lanes.setdefault(origin, _Lane())
        if kind in PARTIAL_KINDS:
            self._partial(lane, line, kind, payload, report)
        else:
            self._complete_expected(lane, kind, payload, report)
            self._pairing(lane, line, kind, payload, report)
        return issues

    def _partial(
        self, lane: _Lane, line: int, kind: str, payload: Mapping[str, Any], report: Report
    ) -> None:
        if lane.awaiting is not None:
            _missing_complete(lane.awaiting, kind, report)
            lane.awaiting = None
        call_id = payload.get("tool_call_id")
        key = f"{kind}::{call_id if isinstance(call_id, str) else ''}"
        event = payload.get("event_type")
        fragment: _Fragment | None = lane.open.get(key)
        if event == "start":
            if fragment is not None:
                report(
                    "error",
                    "restart",
                    f"{kind} start while the fragment from line {fragment.start_line} is open",
                )
            fragment = lane.open[key] = _Fragment(kind, line)
        elif event in ("delta", "stop") and fragment is None:
            report("error", "no-start", f"{kind} {event} without a start")
            fragment = lane.open[key] = _Fragment(kind, line)
        if fragment is None or event not in ("start", "delta", "stop"):
            report("error", "bad-event-type", f"{kind} has event_type {event!r}")
            return
        fragment.add(payload)
        if event == "stop":
            del lane.open[key]
            lane.awaiting = (line, fragment)

    def _complete_expected(
        self, lane: _Lane, kind: str, payload: Mapping[str, Any], report: Report
    ) -> None:
        if lane.awaiting is None:
            return
        stop_line, fragment = lane.awaiting
        lane.awaiting = None
        if kind != _COMPLETE_OF[fragment.kind]:
            _missing_complete((stop_line, fragment), kind, report)
            return
        for key, want in fragment.expected().items():
            got = payload.get(key, [] if key == "images" else "completed")
            if got != want:
                report(
                    "error",
                    "delta-mismatch",
                    f"{kind} {key} differs from the {fragment.kind} fragments of lines "
                    f"{fragment.start_line}-{stop_line}: {_short(got)} != {_short(want)}",
                )

    def _pairing(
        self, lane: _Lane, line: int, kind: str, payload: Mapping[str, Any], report: Report
    ) -> None:
        call_id = payload.get("tool_call_id")
        if kind == "request_begin":
            if lane.request_line is not None:
                report(
                    "error",
                    "request-pairing",
                    f"request_begin while the request from line {lane.request_line} is open",
                )
            lane.request_line = line
        elif kind == "request_end":
            if lane.request_line is None:
                report("error", "request-pairing", "request_end without a request_begin")
            lane.request_line = None
        elif kind == "tool_call" and isinstance(call_id, str):
            if call_id in lane.seen_calls:
                # Unique within the session, across tasks: a resumed trace pairs
                # each output with the call of its id.
                first = lane.seen_calls[call_id]
                report(
                    "error",
                    "tool-pairing",
                    f"tool_call id {call_id!r} used twice (first on line {first}); "
                    "ids must be unique within a session",
                )
            else:
                lane.seen_calls[call_id] = line
            # Only a completed call runs; others need no output.
            if payload.get("stop_reason", "completed") == "completed":
                lane.calls[call_id] = line
        elif kind == "tool_call_output" and isinstance(call_id, str):
            if call_id not in lane.seen_calls:
                report("error", "tool-pairing", f"tool_call_output for unknown call {call_id!r}")
            elif lane.calls.pop(call_id, None) is None:
                report("error", "tool-pairing", f"second tool_call_output for {call_id!r}")
        elif kind == "approval_decision" and isinstance(call_id, str):
            if call_id not in lane.seen_calls:
                report("error", "approval", f"approval_decision for unknown call {call_id!r}")
            elif call_id not in lane.calls:
                report("error", "approval", f"approval_decision after the output of {call_id!r}")

    def finish(self) -> list[Issue]:
        issues: list[Issue] = []
        for lane in self._lanes.values():
            for fragment in lane.open.values():
                issues.append(
                    Issue(
                        fragment.start_line,
                        "error",
                        "unclosed",
                        f"{fragment.kind} fragment never stopped",
                    )
                )
            if lane.awaiting is not None:
                stop_line, fragment = lane.awaiting
                issues.append(
                    Issue(
                        stop_line,
                        "error",
                        "missing-complete",
                        f"the stream ends before the complete {_COMPLETE_OF[fragment.kind]}",
                    )
                )
            if lane.request_line is not None:
                issues.append(
                    Issue(lane.request_line, "warning", "request-pairing", "request never ended")
                )
            for call_id, call_line in lane.calls.items():
                issues.append(
                    Issue(
                        call_line, "warning", "tool-pairing", f"tool_call {call_id!r} has no output"
                    )
                )
        self._lanes.clear()
        return sorted(issues, key=lambda i: i.line)


def validate_records(
    records: Iterable[TraceRecord], *, trace: bool | None = None
) -> Iterator[Issue]:
    """Yields the issues of a record stream, as soon as each is known."""
    validator = TraceValidator(trace=trace)
    for record in records:
        yield from validator.check(record.line, message_to_dict(record.message))
    yield from validator.finish()


def _missing_complete(awaiting: tuple[int, _Fragment], got: str, report: Report) -> None:
    stop_line, fragment = awaiting
    report(
        "error",
        "missing-complete",
        f"the {fragment.kind} stop at line {stop_line} is not followed by its "
        f"complete {_COMPLETE_OF[fragment.kind]} (got {got})",
    )


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
