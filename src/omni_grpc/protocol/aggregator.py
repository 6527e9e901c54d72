"""``PartialAggregator``: joins ``partial_*`` fragments into complete messages with
the reference semantics (``aggregate.ts``).

* A fragment's key is ``<payload type>::<tool_call_id or "">``; ``origin`` is not
  part of it (as in the reference), so text from two origins at once collides.
* ``start`` finalizes an already open fragment with the same key, then opens a
  new one with the start's content. ``delta``/``stop`` without a start open one.
* Content is appended; a tool-call ``name`` is updated only when non-empty, the
  ``tool_call_id`` overwritten, ``images`` replaced when non-empty, and the last
  ``stop_reason`` given wins.
* ``stop`` finalizes through the builders: a new timestamp (from ``clock``), no
  fidelity, no origin, no sender.
* Non-partial messages pass through unchanged and in order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from omni_grpc.protocol import builders
from omni_grpc.protocol.guards import PARTIAL_KINDS
from omni_grpc.protocol.timestamps import Clock, now_timestamp

Json = dict[str, Any]

# Which payload key carries the incremental content of each partial kind.
_CONTENT_KEY = {
    "partial_text": "text",
    "partial_thinking": "thinking",
    "partial_tool_call": "arguments",
    "partial_tool_call_output": "output",
}


@dataclass
class _Fragment:
    kind: str
    buffer: list[str] = field(default_factory=list)
    name: str = ""
    tool_call_id: str = ""
    images: list[str] = field(default_factory=list)
    stop_reason: str = "completed"

    def append(self, payload: Mapping[str, Any]) -> None:
        content = payload.get(_CONTENT_KEY[self.kind])
        if isinstance(content, str):
            self.buffer.append(content)
        name = payload.get("name")
        if isinstance(name, str) and name:
            self.name = name
        call_id = payload.get("tool_call_id")
        if isinstance(call_id, str):
            self.tool_call_id = call_id
        images = payload.get("images")
        if isinstance(images, list) and images:
            self.images = [str(i) for i in images]
        stop_reason = payload.get("stop_reason")
        if isinstance(stop_reason, str):
            self.stop_reason = stop_reason

    def finalize(self, timestamp: str) -> Json:
        text = "".join(self.buffer)
        reason = self.stop_reason
        if self.kind == "partial_text":
            return builders.assistant_text(text, stop_reason=reason, timestamp=timestamp)
        if self.kind == "partial_thinking":
            return builders.thinking(text, stop_reason=reason, timestamp=timestamp)
        if self.kind == "partial_tool_call":
            return builders.tool_call(
                self.name, text, self.tool_call_id, stop_reason=reason, timestamp=timestamp
            )
        return builders.tool_call_output(
            text, self.tool_call_id, images=self.images, stop_reason=reason, timestamp=timestamp
        )


class PartialAggregator:
    """Feed messages with :meth:`push`; call :meth:`flush` at the end of a stream."""

    def __init__(self, clock: Clock = now_timestamp) -> None:
        self._clock = clock
        # Insertion order is opening order, which flush() must keep.
        self._open: dict[str, _Fragment] = {}

    def push(self, msg: Mapping[str, Any]) -> list[Json]:
        """Returns the messages that are complete after ``msg``: itself when it is
        not a partial, a finalized fragment on ``stop`` (or on a colliding ``start``)."""
        payload = msg.get("payload")
        kind = payload.get("type") if isinstance(payload, Mapping) else None
        if msg.get("type") != "model_msg" or kind not in PARTIAL_KINDS:
            return [dict(msg)]
        assert isinstance(payload, Mapping) and isinstance(kind, str)
        call_id = payload.get("tool_call_id")
        key = f"{kind}::{call_id if isinstance(call_id, str) else ''}"
        event = payload.get("event_type")
        out: list[Json] = []
        if event == "start" and key in self._open:
            out.append(self._open.pop(key).finalize(self._clock()))
        fragment = self._open.get(key)
        if fragment is None:
            fragment = self._open[key] = _Fragment(kind)
        fragment.append(payload)
        if event == "stop":
            del self._open[key]
            out.append(fragment.finalize(self._clock()))
        return out

    def flush(self) -> list[Json]:
        """Finalizes the fragments still open, in the order they were opened."""
        fragments = list(self._open.values())
        self._open.clear()
        return [f.finalize(self._clock()) for f in fragments]

    @property
    def open_count(self) -> int:
        return len(self._open)


def aggregate_all(
    messages: Iterable[Mapping[str, Any]], *, clock: Clock = now_timestamp
) -> list[Json]:
    """Push every message, then flush."""
    aggregator = PartialAggregator(clock)
    out: list[Json] = []
    for msg in messages:
        out.extend(aggregator.push(msg))
    out.extend(aggregator.flush())
    return out
