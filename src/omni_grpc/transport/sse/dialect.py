"""The seed's "Omni SSE" dialect: a projection of one run onto six named events.

``thought``, ``tool_call``, ``tool_result``, ``message``, ``error`` and ``done``
are the seed's events, sent exactly as specified. One extension,
``approval_request``, tells a client that the run waits for an answer and
where to send it. :class:`DialectProjection` is a pure state machine: feed it
the run's OmniMessages in hub order and it returns the dialect events to send,
in the same order; :meth:`DialectProjection.finish` closes the run with exactly
one ``done``. The mapping and what it drops are in docs/sse.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from omni_grpc.transport.sse.wire import encode_frame
from omni_grpc.vocabulary import AbortKind, DialectEventName, RunOutcome
from omni_grpc_proto.omni.v1 import omni_pb2

# The names, spelled once in the vocabulary (the SSE client reads them too).
EventName = DialectEventName

# request_end statuses the engine retries: unrecoverable only if nothing
# follows them but the end of the run.
_RETRIED = {
    omni_pb2.STOP_REASON_FAILED: "failed",
    omni_pb2.STOP_REASON_TIMEOUT: "timeout",
    omni_pb2.STOP_REASON_MALFORMED: "malformed",
}


@dataclass(frozen=True)
class DialectEvent:
    event: EventName
    data: dict[str, Any]

    def encode(self, event_id: str | None = None) -> bytes:
        """The SSE frame: a named event with compact JSON data (and its id)."""
        return encode_frame(orjson.dumps(self.data), event=self.event, event_id=event_id)


@dataclass(frozen=True)
class _Failure:
    code: str
    message: str


def parse_tool_arguments(arguments: str) -> tuple[dict[str, Any], str | None]:
    """``args`` for a tool_call event, plus the raw text when it is not an object.

    Models sometimes write invalid or non-object JSON. The dialect promises an
    object, so such arguments become ``{}`` and their exact text travels in
    ``raw_args``; empty arguments (a tool without parameters) are just ``{}``.
    """
    if arguments.strip() == "":
        return {}, None
    try:
        parsed = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return {}, arguments
    if isinstance(parsed, dict):
        return parsed, None
    return {}, arguments


class DialectProjection:
    """Turns one run's messages into dialect events (see the module doc)."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.total_tokens = 0
        self._streamed = ""  # assistant text sent as deltas since the last complete text
        self._text_sent = False  # any reply text yet (later segments start a paragraph)
        self._in_compaction = False
        self._aborted = False
        self._pending_failure: _Failure | None = None
        self._error_sent = False
        self._done = False
        self._asked: set[str] = set()  # tool_call_ids an approval_request was sent for

    @property
    def done(self) -> bool:
        return self._done

    def feed(self, msg: Any, abort_kind: AbortKind | None = None) -> list[DialectEvent]:
        """The dialect events for one OmniMessage (``omni_pb2.OmniMessage``).

        ``abort_kind`` is the hub's word on who ended the run (``HubEvent.abort_kind``):
        an ``abort`` of a failure kind becomes an ``error``; without a kind an
        abort reads as a stop someone asked for."""
        if self._done:
            return []
        kind = msg.WhichOneof("payload")
        if kind == "abort" and not msg.origin:
            return self._on_abort(msg.abort, abort_kind)
        if kind == "token_usage":
            # Subagents spend tokens for this run too, so origin does not matter.
            self.total_tokens += int(msg.token_usage.request.total)
            return []
        if len(msg.origin) > 0:
            # The dialect has no notion of child sessions: their output would
            # read as the main agent's.
            return []
        handler = getattr(self, f"_on_{kind}", None)
        if handler is None:
            return []
        events: list[DialectEvent] = handler(getattr(msg, kind))
        return events

    def approval_request(self, tool_call: Any, answer_path: str) -> list[DialectEvent]:
        """The extension event for a pending approval (``tool_call`` is the
        OmniMessage asked about): once per call, however often the hub re-sends
        the request to new subscribers."""
        if self._done or len(tool_call.origin) > 0:
            return []
        call = tool_call.tool_call
        if call.tool_call_id in self._asked:
            return []
        self._asked.add(call.tool_call_id)
        args, raw = parse_tool_arguments(call.arguments)
        data: dict[str, Any] = {"call_id": call.tool_call_id, "tool": call.name, "args": args}
        if raw is not None:
            data["raw_args"] = raw
        data["answer"] = {"method": "POST", "path": answer_path, "decisions": ["allow", "deny"]}
        return [DialectEvent(EventName.APPROVAL_REQUEST, data)]

    def fail(self, code: str, message: str) -> list[DialectEvent]:
        """An unrecoverable failure outside the messages (engine crash, hub gone)."""
        if self._done or self._error_sent:
            return []
        self._pending_failure = None
        return [self._error(code, message)]

    def finish(self) -> list[DialectEvent]:
        """Ends the run: a still-pending failure becomes ``error``, then ``done``."""
        if self._done:
            return []
        events: list[DialectEvent] = []
        if self._pending_failure is not None and not self._error_sent:
            failure = self._pending_failure
            events.append(self._error(failure.code, failure.message))
        status = RunOutcome.COMPLETED
        if self._error_sent:
            status = RunOutcome.FAILED
        elif self._aborted:
            status = RunOutcome.ABORTED
        self._done = True
        events.append(
            DialectEvent(
                EventName.DONE,
                {"run_id": self.run_id, "total_tokens": self.total_tokens, "status": status.value},
            )
        )
        return events

    # ---- per payload ---------------------------------------------------------

    def _on_thinking(self, p: Any) -> list[DialectEvent]:
        # Encrypted reasoning has empty text (its content is in fidelity only).
        if p.thinking == "":
            return []
        return [DialectEvent(EventName.THOUGHT, {"text": p.thinking})]

    def _on_partial_text(self, p: Any) -> list[DialectEvent]:
        if p.role != omni_pb2.ROLE_ASSISTANT or self._in_compaction or p.text == "":
            return []
        first = self._streamed == ""
        self._streamed += p.text
        return [self._delta(p.text, new_segment=first)]

    def _on_text(self, p: Any) -> list[DialectEvent]:
        if p.role != omni_pb2.ROLE_ASSISTANT or self._in_compaction:
            return []
        streamed, self._streamed = self._streamed, ""
        # Only what the deltas did not already say: the whole text when the
        # segment was never streamed, the missing tail when the stream fell short.
        if streamed and not p.text.startswith(streamed):
            return []
        rest = p.text[len(streamed) :]
        return [self._delta(rest, new_segment=not streamed)] if rest else []

    def _on_tool_call(self, p: Any) -> list[DialectEvent]:
        args, raw = parse_tool_arguments(p.arguments)
        data: dict[str, Any] = {"tool": p.name, "call_id": p.tool_call_id, "args": args}
        if raw is not None:
            data["raw_args"] = raw
        return [DialectEvent(EventName.TOOL_CALL, data)]

    def _on_tool_call_output(self, p: Any) -> list[DialectEvent]:
        return [
            DialectEvent(EventName.TOOL_RESULT, {"call_id": p.tool_call_id, "result": p.output})
        ]

    def _on_request_begin(self, _p: Any) -> list[DialectEvent]:
        self._pending_failure = None  # a retry is under way
        return []

    def _on_request_end(self, p: Any) -> list[DialectEvent]:
        message = p.error_message or p.message
        if p.status == omni_pb2.STOP_REASON_AUTH:
            # Never retried: the run stops here.
            return [self._error("auth", message or "the model provider rejected the credentials")]
        code = _RETRIED.get(p.status)
        if code is not None:
            self._pending_failure = _Failure(code, message or f"model request {code}")
        else:
            self._pending_failure = None
        return []

    def _on_compaction_begin(self, _p: Any) -> list[DialectEvent]:
        # The summary streams as ordinary text; it is not the reply.
        self._in_compaction = True
        return []

    def _on_compaction_end(self, _p: Any) -> list[DialectEvent]:
        self._in_compaction = False
        return []

    def _on_abort(self, p: Any, abort_kind: AbortKind | None) -> list[DialectEvent]:
        self._aborted = True
        if abort_kind is None or not abort_kind.is_failure:
            return []  # someone asked for the stop
        if self._error_sent or self._pending_failure is not None:
            return []  # the failure is already being reported
        reason = p.reason if p.HasField("reason") else ""
        if abort_kind is AbortKind.SERVER_FAILURE:
            # Held for the task end, which names the cause (resource_exhausted...).
            self._pending_failure = _Failure("engine_error", reason or abort_kind.default_reason)
            return []
        return [self._error("engine_error", reason or abort_kind.default_reason)]

    def _delta(self, text: str, *, new_segment: bool) -> DialectEvent:
        # Deltas are appended as they come, so two text segments of one run
        # (before and after a tool call) would run together: a blank line
        # separates them.
        if new_segment and self._text_sent:
            text = "\n\n" + text
        self._text_sent = True
        return DialectEvent(EventName.MESSAGE, {"delta": text})

    def _error(self, code: str, message: str) -> DialectEvent:
        self._error_sent = True
        return DialectEvent(EventName.ERROR, {"code": code, "message": message})
