"""One streamed segment: ``partial_*`` start, deltas, stop, then the complete message.

Engines that stream (openai, replay) and the command bridge (which closes what
a crashed child left open) share this so every segment keeps the discipline:
the concatenated deltas equal the complete message, and the complete message
follows its stop immediately.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from omni_grpc.protocol import builders as b
from omni_grpc_proto.omni.v1 import omni_pb2

JsonObject = dict[str, Any]
SegmentKind = Literal["text", "thinking", "tool_call", "tool_call_output"]
_EVENT_TYPES = {
    omni_pb2.EVENT_TYPE_START: "start",
    omni_pb2.EVENT_TYPE_DELTA: "delta",
    omni_pb2.EVENT_TYPE_STOP: "stop",
}


class Segment:
    def __init__(self, kind: SegmentKind, *, name: str = "", tool_call_id: str = "") -> None:
        self.kind = kind
        self.name = name
        self.tool_call_id = tool_call_id
        self.buffer: list[str] = []
        self.images: list[str] = []

    @property
    def content(self) -> str:
        return "".join(self.buffer)

    def start(self) -> JsonObject:
        return self._partial("start", "")

    def delta(self, chunk: str, images: list[str] | None = None) -> JsonObject:
        self.buffer.append(chunk)
        if images:
            self.images = list(images)
        return self._partial("delta", chunk, images)

    def finish(
        self, stop_reason: str = "completed", fidelity: Mapping[str, Any] | None = None
    ) -> list[JsonObject]:
        """The stop fragment and the complete message."""
        return [
            self._partial("stop", "", stop_reason=stop_reason),
            self.complete(stop_reason, fidelity),
        ]

    def complete(
        self, stop_reason: str = "completed", fidelity: Mapping[str, Any] | None = None
    ) -> JsonObject:
        text = self.content
        if self.kind == "text":
            return b.assistant_text(text, stop_reason=stop_reason, fidelity=fidelity)
        if self.kind == "thinking":
            return b.thinking(text, stop_reason=stop_reason, fidelity=fidelity)
        if self.kind == "tool_call":
            return b.tool_call(
                self.name, text, self.tool_call_id, stop_reason=stop_reason, fidelity=fidelity
            )
        return b.tool_call_output(
            text, self.tool_call_id, images=self.images, stop_reason=stop_reason
        )

    def _partial(
        self,
        event_type: str,
        chunk: str,
        images: list[str] | None = None,
        *,
        stop_reason: str = "completed",
    ) -> JsonObject:
        if self.kind == "text":
            return b.partial_text(event_type, chunk, stop_reason=stop_reason)
        if self.kind == "thinking":
            return b.partial_thinking(event_type, chunk, stop_reason=stop_reason)
        if self.kind == "tool_call":
            return b.partial_tool_call(
                event_type, self.name, chunk, self.tool_call_id, stop_reason=stop_reason
            )
        return b.partial_tool_call_output(
            event_type, chunk, self.tool_call_id, images=images, stop_reason=stop_reason
        )


def chunked(text: str, size: int) -> list[str]:
    """``text`` in pieces of at most ``size`` characters (one empty piece for "")."""
    if size <= 0 or len(text) <= size:
        return [text]
    return [text[i : i + size] for i in range(0, len(text), size)]


class OpenFragments:
    """Tracks the fragments a producer opened but has not stopped yet.

    Keyed like the reference aggregator (payload type and tool_call_id); used to
    close what a failed producer leaked, with the failure's stop_reason.
    """

    _KINDS: dict[str, SegmentKind] = {
        "partial_text": "text",
        "partial_thinking": "thinking",
        "partial_tool_call": "tool_call",
        "partial_tool_call_output": "tool_call_output",
    }
    _CONTENT = {
        "text": "text",
        "thinking": "thinking",
        "tool_call": "arguments",
        "tool_call_output": "output",
    }

    def __init__(self) -> None:
        self._open: dict[tuple[str, str], Segment] = {}

    @property
    def open(self) -> bool:
        return bool(self._open)

    def observe(self, payload: Mapping[str, Any]) -> None:
        kind = self._KINDS.get(str(payload.get("type", "")))
        if kind is None:
            return
        call_id = str(payload.get("tool_call_id") or "")
        key = (kind, call_id)
        event = payload.get("event_type")
        if event == "stop":
            self._open.pop(key, None)
            return
        segment = self._open.get(key)
        if segment is None or event == "start":
            segment = Segment(kind, tool_call_id=call_id)
            self._open[key] = segment
        name = payload.get("name")
        if isinstance(name, str) and name:
            segment.name = name
        chunk = payload.get(self._CONTENT[kind])
        if isinstance(chunk, str) and chunk:
            segment.buffer.append(chunk)

    def observe_message(self, message: omni_pb2.OmniMessage) -> None:
        """``observe`` for a protobuf message, reading only the fields it needs."""
        arm = message.WhichOneof("payload")
        kind = self._KINDS.get(arm or "")
        if kind is None:
            return
        part = getattr(message, str(arm))
        self.observe(
            {
                "type": arm,
                "event_type": _EVENT_TYPES.get(part.event_type, ""),
                "tool_call_id": getattr(part, "tool_call_id", ""),
                "name": getattr(part, "name", ""),
                self._CONTENT[kind]: getattr(part, self._CONTENT[kind]),
            }
        )

    def close_all(self, stop_reason: str) -> list[JsonObject]:
        """Stop fragments and complete messages for everything still open."""
        closed: list[JsonObject] = []
        for segment in self._open.values():
            closed.extend(segment.finish(stop_reason))
        self._open.clear()
        return closed
