"""Keeps a run's stream well-formed when its engine does not finish it.

Engines close their own fragments and requests and yield ``abort`` last. When
one crashes, yields garbage or ignores an abort past the grace period, the hub
asks this guard for the messages that close what is still open: each open
fragment's ``stop`` and complete message, ``request_end``, then ``abort``.
Observing is on every message's path, so it only records chunks; the complete
messages are built when they are needed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from omni_grpc import protocol
from omni_grpc.engines.base import JsonObject

# partial kind -> the payload key its content accumulates in
_CONTENT = {
    "partial_text": "text",
    "partial_thinking": "thinking",
    "partial_tool_call": "arguments",
    "partial_tool_call_output": "output",
}


@dataclass
class _Open:
    kind: str
    tool_call_id: str
    name: str = ""
    chunks: list[str] = field(default_factory=list)


def _close(fragment: _Open, stop_reason: str) -> list[JsonObject]:
    text = "".join(fragment.chunks)
    cid, sr = fragment.tool_call_id, stop_reason
    if fragment.kind == "partial_text":
        return [
            protocol.partial_text("stop", stop_reason=sr),
            protocol.assistant_text(text, stop_reason=sr),
        ]
    if fragment.kind == "partial_thinking":
        return [
            protocol.partial_thinking("stop", stop_reason=sr),
            protocol.thinking(text, stop_reason=sr),
        ]
    if fragment.kind == "partial_tool_call":
        return [
            protocol.partial_tool_call("stop", fragment.name, "", cid, stop_reason=sr),
            protocol.tool_call(fragment.name, text, cid, stop_reason=sr),
        ]
    return [
        protocol.partial_tool_call_output("stop", "", cid, stop_reason=sr),
        protocol.tool_call_output(text, cid, stop_reason=sr),
    ]


class RunGuard:
    def __init__(self) -> None:
        # Open fragments by the reference aggregator's key, in opening order.
        self._open: dict[str, _Open] = {}
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
        content_key = _CONTENT.get(kind) if isinstance(kind, str) else None
        if content_key is not None:
            assert isinstance(kind, str)
            cid = payload.get("tool_call_id")
            key = f"{kind}::{cid if isinstance(cid, str) else ''}"
            event = payload.get("event_type")
            if event == "stop":
                self._open.pop(key, None)
                return
            fragment = self._open.get(key)
            if fragment is None or event == "start":
                fragment = self._open[key] = _Open(kind, cid if isinstance(cid, str) else "")
            if payload.get("name"):
                fragment.name = str(payload["name"])
            chunk = payload.get(content_key)
            if isinstance(chunk, str) and chunk:
                fragment.chunks.append(chunk)
        elif kind == "request_begin":
            self.request_open = True
        elif kind == "request_end":
            self.request_open = False
        elif kind == "abort":
            self.abort_seen = True

    def fragments(self) -> list[JsonObject]:
        """Each open fragment as a synthetic ``start`` carrying what has streamed
        so far, in opening order (the reference live tail's ``fragments``)."""
        out: list[JsonObject] = []
        for fragment in self._open.values():
            text, cid = "".join(fragment.chunks), fragment.tool_call_id
            if fragment.kind == "partial_text":
                out.append(protocol.partial_text("start", text))
            elif fragment.kind == "partial_thinking":
                out.append(protocol.partial_thinking("start", text))
            elif fragment.kind == "partial_tool_call":
                out.append(protocol.partial_tool_call("start", fragment.name, text, cid))
            else:
                out.append(protocol.partial_tool_call_output("start", text, cid))
        return out

    def closing_messages(
        self, *, aborted: bool, reason: str, error: str | None
    ) -> list[JsonObject]:
        """What closes the run: fragment stops and completes, request_end, abort."""
        stop_reason = "aborted" if aborted else "failed"
        out: list[JsonObject] = []
        for fragment in self._open.values():
            out.extend(_close(fragment, stop_reason))
        self._open.clear()
        if self.request_open:
            out.append(protocol.request_end(stop_reason, error_message=error))
            self.request_open = False
        if not self.abort_seen:
            out.append(protocol.abort_event(reason))
            self.abort_seen = True
        return out
