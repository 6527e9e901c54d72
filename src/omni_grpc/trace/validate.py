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
from omni_grpc.protocol.streaming import Fragment, OpenFragments, SegmentKind
from omni_grpc.trace.records import TraceRecord
from omni_grpc.vocabulary import Decision, EventType, StopReason

Severity = Literal["error", "warning"]
Report = Callable[[Severity, str, str], None]

_STOP_REASONS = frozenset(StopReason)
_EVENT_TYPES = tuple(EventType)  # a tuple: an unhashable value must not raise
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


def _expected(fragment: Fragment) -> dict[str, Any]:
    """The fields the complete message must have."""
    kind = fragment.kind
    out: dict[str, Any] = {kind.content_key: fragment.content, "stop_reason": fragment.stop_reason}
    if kind is SegmentKind.TOOL_CALL:
        out |= {"name": fragment.name, "tool_call_id": fragment.tool_call_id}
    elif kind is SegmentKind.TOOL_CALL_OUTPUT:
        out |= {"tool_call_id": fragment.tool_call_id, "images": fragment.images}
    return out


def _start_line(fragment: Fragment) -> int:
    return fragment.opened_at or 0


@dataclass
class _Lane:
    """Per-origin-chain state."""

    open: OpenFragments = field(default_factory=OpenFragments)
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
                elif type(value) is int:  # how the codec writes a newer schema's enum number
                    report(
                        "warning",
                        "unknown-value",
                        f"{key} {value} in {kind} is an enum number this schema has no name for",
                    )

        lane = self._lanes.setdefault(origin, _Lane())
        # A stop owes its complete message, which must be this one.
        owed = lane.open.settle()
        if kind in PARTIAL_KINDS:
            if owed is not None:
                _missing_complete(owed, kind, report)
            self._partial(lane, line, kind, payload, report)
        else:
            if owed is not None:
                _check_complete(owed, kind, payload, report)
            self._pairing(lane, line, kind, payload, report)
        return issues

    def _partial(
        self, lane: _Lane, line: int, kind: str, payload: Mapping[str, Any], report: Report
    ) -> None:
        event = payload.get("event_type")
        if event not in _EVENT_TYPES:
            # Reported, and kept out of the fragments: its content cannot be placed.
            report("error", "bad-event-type", f"{kind} has event_type {event!r}")
            return
        step = lane.open.push(payload, at=line)
        assert step is not None
        if step.replaced is not None:
            opened = _start_line(step.replaced)
            report(
                "error", "restart", f"{kind} start while the fragment from line {opened} is open"
            )
        if step.implicit:
            report("error", "no-start", f"{kind} {event} without a start")

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
            if payload.get("stop_reason", StopReason.COMPLETED) == StopReason.COMPLETED:
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
            for fragment in lane.open.fragments:
                issues.append(
                    Issue(
                        _start_line(fragment),
                        "error",
                        "unclosed",
                        f"{fragment.kind.partial} fragment never stopped",
                    )
                )
            owed = lane.open.settle()
            if owed is not None:
                issues.append(
                    Issue(
                        owed.stopped_at or 0,
                        "error",
                        "missing-complete",
                        f"the stream ends before the complete {owed.kind}",
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


def _check_complete(
    fragment: Fragment, kind: str, payload: Mapping[str, Any], report: Report
) -> None:
    """``payload`` follows the stop of ``fragment``: it must be the joined fragments."""
    if kind != fragment.kind:
        _missing_complete(fragment, kind, report)
        return
    for key, want in _expected(fragment).items():
        got = payload.get(key, [] if key == "images" else StopReason.COMPLETED)
        if got != want:
            report(
                "error",
                "delta-mismatch",
                f"{kind} {key} differs from the {fragment.kind.partial} fragments of lines "
                f"{_start_line(fragment)}-{fragment.stopped_at}: {_short(got)} != {_short(want)}",
            )


def _missing_complete(fragment: Fragment, got: str, report: Report) -> None:
    report(
        "error",
        "missing-complete",
        f"the {fragment.kind.partial} stop at line {fragment.stopped_at} is not followed by "
        f"its complete {fragment.kind} (got {got})",
    )


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
