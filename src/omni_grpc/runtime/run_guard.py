"""Keeps a run's stream well-formed when its engine does not finish it.

Engines close their own fragments and requests and yield ``abort`` last. When
one crashes, yields garbage or ignores an abort past the grace period, the hub
asks this guard for the messages that close what is still open: each open
fragment's ``stop`` and complete message, ``request_end``, then ``abort``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from omni_grpc import protocol
from omni_grpc.engines.base import JsonObject

_PARTIAL_BUILDERS = {
    "partial_text": lambda p, sr: protocol.partial_text("stop", stop_reason=sr),
    "partial_thinking": lambda p, sr: protocol.partial_thinking("stop", stop_reason=sr),
    "partial_tool_call": lambda p, sr: protocol.partial_tool_call(
        "stop", p.get("name", ""), "", p.get("tool_call_id", ""), stop_reason=sr
    ),
    "partial_tool_call_output": lambda p, sr: protocol.partial_tool_call_output(
        "stop", "", p.get("tool_call_id", ""), stop_reason=sr
    ),
}


class RunGuard:
    def __init__(self) -> None:
        self._aggregator = protocol.PartialAggregator()
        # Open fragments by aggregator key: the payload that opened them.
        self._open: dict[str, Mapping[str, Any]] = {}
        self.request_open = False
        self.abort_seen = False

    def observe(self, msg: Mapping[str, Any]) -> None:
        """Feeds one message the run emitted, in order."""
        if msg.get("origin"):
            return  # a child session's stream is its engine's business
        payload = msg.get("payload")
        if not isinstance(payload, Mapping):
            return
        kind = payload.get("type")
        if kind in _PARTIAL_BUILDERS:
            key = f"{kind}::{payload.get('tool_call_id') or ''}"
            event = payload.get("event_type")
            if event == "stop":
                self._open.pop(key, None)
            else:
                self._open.setdefault(key, payload)
            self._aggregator.push(msg)
        elif kind == "request_begin":
            self.request_open = True
        elif kind == "request_end":
            self.request_open = False
        elif kind == "abort":
            self.abort_seen = True

    def closing_messages(
        self, *, aborted: bool, reason: str, error: str | None
    ) -> list[JsonObject]:
        """What closes the run: fragment stops and completes, request_end, abort."""
        stop_reason = "aborted" if aborted else "failed"
        out: list[JsonObject] = []
        for payload in list(self._open.values()):
            stop = _PARTIAL_BUILDERS[str(payload["type"])](payload, stop_reason)
            out.append(stop)
            out.extend(self._aggregator.push(stop))
        self._open.clear()
        if self.request_open:
            out.append(protocol.request_end(stop_reason, error_message=error))
            self.request_open = False
        if not self.abort_seen:
            out.append(protocol.abort_event(reason))
            self.abort_seen = True
        return out
