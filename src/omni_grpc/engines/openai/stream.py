"""Turns ``chat.completion.chunk`` objects into OmniMessage segments.

``content`` becomes text, ``reasoning_content``/``reasoning`` becomes thinking
(the field name kept in ``fidelity.reasoning_field``), and tool-call deltas
become ``partial_tool_call`` fragments. One segment is open at a time: a new
kind of delta, or a new tool-call index, closes the open one, so each complete
message follows its stop immediately.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from typing import Any

from omni_grpc.engines.call_ids import fresh_id
from omni_grpc.protocol.streaming import Segment, SegmentKind
from omni_grpc.vocabulary import StopReason

JsonObject = dict[str, Any]

REASONING_FIELDS = ("reasoning_content", "reasoning")


class MalformedStream(Exception):
    """The stream broke the chat-completions format (status ``malformed``)."""


class TurnAssembler:
    def __init__(self, used_call_ids: set[str] | None = None) -> None:
        # Every tool_call_id the session has used: a call must not reuse one, or
        # a resumed trace would pair an output with the wrong call. Shared with
        # the caller, and added to as calls open.
        self.used_call_ids = used_call_ids if used_call_ids is not None else set()
        self._open: Segment | None = None
        self._open_index: int | None = None
        self._reasoning_field = ""
        self.tool_calls: list[JsonObject] = []
        self.messages: list[JsonObject] = []  # complete messages, in stream order
        self.usage: JsonObject | None = None
        self.finish_reason: str | None = None

    def feed(self, chunk: object) -> list[JsonObject]:
        """The fragments and complete messages one chunk produces."""
        if not isinstance(chunk, Mapping):
            raise MalformedStream("a chunk is not a JSON object")
        if isinstance(chunk.get("error"), Mapping):
            raise MalformedStream(
                f"error in stream: {chunk['error'].get('message', chunk['error'])}"
            )
        out: list[JsonObject] = []
        usage = chunk.get("usage")
        if isinstance(usage, Mapping):
            self.usage = dict(usage)
        choices = chunk.get("choices", [])
        if not isinstance(choices, list):
            raise MalformedStream("'choices' is not an array")
        for choice in choices:
            if not isinstance(choice, Mapping) or choice.get("index", 0) != 0:
                continue  # n > 1 is never requested; ignore other choices
            delta = choice.get("delta") or {}
            if not isinstance(delta, Mapping):
                raise MalformedStream("'delta' is not an object")
            out += self._delta(delta)
            if choice.get("finish_reason"):
                self.finish_reason = str(choice["finish_reason"])
        return out

    def _delta(self, delta: Mapping[str, Any]) -> list[JsonObject]:
        out: list[JsonObject] = []
        for field in REASONING_FIELDS:
            piece = delta.get(field)
            if isinstance(piece, str) and piece:
                out += self._switch("thinking")
                self._reasoning_field = field
                out.append(self._piece(piece))
        content = delta.get("content")
        if isinstance(content, str) and content:
            out += self._switch("text")
            out.append(self._piece(content))
        calls = delta.get("tool_calls")
        if calls is not None:
            if not isinstance(calls, list):
                raise MalformedStream("'tool_calls' is not an array")
            for call in calls:
                out += self._tool_call_delta(call)
        return out

    def _tool_call_delta(self, call: object) -> list[JsonObject]:
        if not isinstance(call, Mapping):
            raise MalformedStream("a tool call delta is not an object")
        index = call.get("index", self._open_index if self._open_index is not None else 0)
        function = call.get("function") or {}
        if not isinstance(index, int) or not isinstance(function, Mapping):
            raise MalformedStream("a tool call delta has no integer 'index'")
        out: list[JsonObject] = []
        segment = self._open
        if (
            segment is None
            or segment.kind is not SegmentKind.TOOL_CALL
            or index != self._open_index
        ):
            out += self.close()
            call_id = call.get("id")
            if not isinstance(call_id, str) or not call_id:
                # Some servers omit ids; invent one so outputs can pair.
                call_id = f"call_{secrets.token_hex(8)}"
            elif call_id in self.used_call_ids:
                # Some servers number calls per response (call_0 every turn).
                call_id = fresh_id(call_id)
            self.used_call_ids.add(call_id)
            segment = Segment(
                SegmentKind.TOOL_CALL, name=str(function.get("name") or ""), tool_call_id=call_id
            )
            self._open, self._open_index = segment, index
            out.append(segment.start())
        elif isinstance(function.get("name"), str) and function["name"]:
            segment.name += function["name"]
        arguments = function.get("arguments")
        if isinstance(arguments, str) and arguments:
            out.append(segment.delta(arguments))
        return out

    def _switch(self, kind: str) -> list[JsonObject]:
        if self._open is not None and self._open.kind == kind:
            return []
        out = self.close()
        self._open = Segment(SegmentKind.THINKING if kind == "thinking" else SegmentKind.TEXT)
        out.append(self._open.start())
        return out

    def _piece(self, text: str) -> JsonObject:
        assert self._open is not None
        return self._open.delta(text)

    def close(self, stop_reason: str = StopReason.COMPLETED) -> list[JsonObject]:
        """Closes the open segment: its stop fragment and complete message."""
        segment, self._open, self._open_index = self._open, None, None
        if segment is None:
            return []
        fidelity = None
        if segment.kind is SegmentKind.THINKING and self._reasoning_field:
            fidelity = {"reasoning_field": self._reasoning_field}
        stop, complete = segment.finish(stop_reason, fidelity)
        self.messages.append(complete)
        if segment.kind is SegmentKind.TOOL_CALL:
            self.tool_calls.append(complete)
        return [stop, complete]
