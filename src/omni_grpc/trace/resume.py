"""Resuming a session from its trace, and closing what a crash left open.

The rules are the reference's (``trace/resume.ts``), restated for this project:

* A turn is a ``request_begin`` .. ``request_end`` span. It is *committed* only
  when its ``request_end`` says ``completed``; any other ending, or none at all
  (the process died mid-request), drops the turn. Its assistant output is
  lost and its user input goes back to the pending input (the carry-over).
* User-side messages are attributed by position: everything user-side written
  since the previous turn's input was taken is the next turn's input, including
  tool outputs that finished while a request was streaming.
* A ``tool_call_output`` is only ever resent when it answers a committed,
  not yet answered ``tool_call``; otherwise it would be an orphan the model
  provider rejects. A committed call with no output gets the placeholder
  output :data:`PROCESS_EXIT_PLACEHOLDER` (``aborted``) in memory.
* A file whose last record is a completed ``compaction_end`` is a closed
  context: nothing of it is replayed.

:func:`resume_trace` computes that state for an engine. :func:`closing_records`
is what the *server* appends to a trace on restart so that the interrupted run
is closed in the file itself (``request_end aborted``, a failed
``compaction_end`` for a dangling compaction, the placeholder output for each
call left without one, then one ``abort``). Appending them does not change what
:func:`resume_trace` returns, except that the placeholders become real records;
the trace then passes ``omni-grpc validate`` and the next run's
``request_begin`` does not land inside a request that never ended.

Messages are JSON objects (``message_to_dict`` form) throughout.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omni_grpc import protocol
from omni_grpc.trace.jsonl import read_jsonl
from omni_grpc.trace.records import SkippedLine
from omni_grpc.vocabulary import StopReason

Json = dict[str, Any]

# The text of the stand-in output for a tool the process never saw finish.
PROCESS_EXIT_PLACEHOLDER = "[interrupted: process exited before the tool finished]"
# The abort reason (and request_end error_message) recorded for a run the
# server found unfinished when it started again.
INTERRUPTED_REASON = "interrupted: the server stopped before the run finished"


@dataclass
class ResumeResult:
    # The first session_meta record; None when the trace has none.
    meta: Json | None
    # Complete model messages of committed turns, in order (empty when closed).
    history: list[Json] = field(default_factory=list)
    # Input to send again with the next run, placeholders included.
    carry_over: list[Json] = field(default_factory=list)
    # The file ends with a completed compaction: its context is closed.
    context_closed: bool = False
    # For a closed ``summarize`` compaction: the assistant text of the last
    # completed request (the summary the engine wraps for the new context).
    summary_text: str | None = None
    # token_usage.session of the last token_usage (zeros when none).
    session_tokens: Json = field(default_factory=protocol.empty_token_counts)
    # token_usage.request.total of the last token_usage.
    last_request_total: int = 0
    # Completed requests outside compactions.
    session_turns: int = 0


def _payload(msg: Mapping[str, Any]) -> Mapping[str, Any]:
    payload = msg.get("payload")
    return payload if isinstance(payload, Mapping) else {}


def _kind(msg: Mapping[str, Any]) -> str:
    if msg.get("type") == "session_meta":
        return "session_meta"
    kind = _payload(msg).get("type")
    return kind if isinstance(kind, str) else ""


def _output_id(msg: Mapping[str, Any]) -> str | None:
    payload = _payload(msg)
    if payload.get("type") != "tool_call_output":
        return None
    call_id = payload.get("tool_call_id")
    return call_id if isinstance(call_id, str) else None


def placeholder_output(tool_call_id: str) -> Json:
    return protocol.tool_call_output(
        PROCESS_EXIT_PLACEHOLDER, tool_call_id, stop_reason=StopReason.ABORTED
    )


class _Replay:
    """One pass over a context's records (the turn-by-turn rules above)."""

    def __init__(self) -> None:
        self.history: list[Json] = []
        self.pending: list[Json] = []  # user-side messages no committed turn has sent
        self.snapshot: list[Json] = []  # the open turn's input, taken at its begin
        self.outputs: list[Json] = []  # the open turn's assistant messages
        self.in_request = False
        self.in_compaction = False
        self.committed_calls: list[str] = []  # insertion-ordered set
        self.answered: set[str] = set()
        self.turns = 0

    def eligible(self, msg: Json) -> bool:
        call_id = _output_id(msg)
        return call_id is None or (call_id in self.committed_calls and call_id not in self.answered)

    def drop_turn(self) -> None:
        # A compaction's prompt is not conversation: only tool outputs come back.
        keep = (
            [m for m in self.snapshot if _output_id(m) is not None]
            if self.in_compaction
            else self.snapshot
        )
        self.pending = keep + self.pending
        self.snapshot, self.outputs, self.in_request = [], [], False

    def commit_turn(self) -> None:
        taken = [m for m in self.snapshot if self.eligible(m)]
        taken_ids = {i for i in map(_output_id, taken) if i is not None}
        # A call committed earlier whose output was never recorded: keep the
        # history well-formed with the placeholder before this turn's input.
        for call_id in self.committed_calls:
            if call_id not in self.answered and call_id not in taken_ids:
                self.history.append(placeholder_output(call_id))
                self.answered.add(call_id)
        self.history += taken + self.outputs
        self.answered |= taken_ids
        for msg in self.outputs:
            payload = _payload(msg)
            new_id = payload.get("tool_call_id")
            if (
                payload.get("type") == "tool_call"
                and payload.get("stop_reason", StopReason.COMPLETED) == StopReason.COMPLETED
                and isinstance(new_id, str)
                and new_id
                and new_id not in self.committed_calls
            ):
                self.committed_calls.append(new_id)
        if not self.in_compaction:
            self.turns += 1
        self.snapshot, self.outputs, self.in_request = [], [], False

    def feed(self, msg: Json) -> None:
        kind = _kind(msg)
        if kind == "session_meta":
            return
        if kind == "request_begin":
            if self.in_request:  # two begins: the first turn never ended
                self.drop_turn()
            self.in_request = True
            self.snapshot, self.pending = self.pending, []
        elif kind == "request_end":
            if self.in_request and _payload(msg).get("status") == StopReason.COMPLETED:
                self.commit_turn()
            else:
                self.drop_turn()
        elif msg.get("type") == "model_msg":
            if _payload(msg).get("role") == "user":
                self.pending.append(msg)
            elif self.in_request:
                self.outputs.append(msg)
        elif kind == "compaction_begin":
            self.in_compaction = True
        elif kind == "compaction_end":
            self.in_compaction = False

    def carry_over(self) -> list[Json]:
        if self.in_request:
            self.drop_turn()
        pending = [m for m in self.pending if self.eligible(m)]
        paired = self.answered | {i for i in map(_output_id, pending) if i is not None}
        backfill = [placeholder_output(c) for c in self.committed_calls if c not in paired]
        return pending + backfill


def resume_trace(messages: Sequence[Mapping[str, Any]]) -> ResumeResult:
    """What a session needs to continue from ``messages`` (one context's file)."""
    records = [dict(m) for m in messages]
    meta = next((m for m in records if _kind(m) == "session_meta"), None)
    result = ResumeResult(meta=meta)
    for msg in reversed(records):
        payload = _payload(msg)
        if payload.get("type") == "token_usage":
            session, request = payload.get("session"), payload.get("request")
            if isinstance(session, Mapping):
                result.session_tokens = dict(session)
            if isinstance(request, Mapping) and isinstance(request.get("total"), int):
                result.last_request_total = request["total"]
            break

    last = _payload(records[-1]) if records else {}
    if last.get("type") == "compaction_end" and last.get("status") == StopReason.COMPLETED:
        summary = _last_completed_text(records)
        # A summarize compaction whose summary came out empty did not really
        # close the context (older engines wrote such files): replay it instead.
        if last.get("mode") != "summarize" or summary:
            result.context_closed = True
            result.last_request_total = 0
            result.summary_text = summary if last.get("mode") == "summarize" else None
            return result

    replay = _Replay()
    for msg in records:
        replay.feed(msg)
    result.carry_over = replay.carry_over()
    result.history = replay.history
    result.session_turns = replay.turns
    return result


def _last_completed_text(records: Iterable[Mapping[str, Any]]) -> str:
    text, current, in_request = "", "", False
    for msg in records:
        payload = _payload(msg)
        kind = payload.get("type")
        if kind == "request_begin":
            in_request, current = True, ""
        elif kind == "request_end":
            if payload.get("status") == StopReason.COMPLETED:
                text = current
            in_request = False
        elif (
            in_request
            and kind == "text"
            and payload.get("role") == "assistant"
            and isinstance(payload.get("text"), str)
        ):
            current += payload["text"]
    return text


def closing_records(
    messages: Sequence[Mapping[str, Any]], reason: str = INTERRUPTED_REASON
) -> list[Json]:
    """The records that close a run the process did not finish; ``[]`` when
    nothing is open. Only origin-less messages count (traces hold no others)."""
    request_open = False
    compaction: Mapping[str, Any] | None = None
    unanswered: dict[str, None] = {}  # calls that ran (or were to run) without output
    for msg in messages:
        if msg.get("origin"):
            continue
        payload = _payload(msg)
        kind = payload.get("type")
        call_id = payload.get("tool_call_id")
        if kind == "request_begin":
            request_open = True
        elif kind == "request_end":
            request_open = False
        elif kind == "compaction_begin":
            compaction = payload
        elif kind == "compaction_end":
            compaction = None
        elif kind == "tool_call" and isinstance(call_id, str):
            if payload.get("stop_reason", StopReason.COMPLETED) == StopReason.COMPLETED:
                unanswered[call_id] = None
        elif kind == "tool_call_output" and isinstance(call_id, str):
            unanswered.pop(call_id, None)
    closing: list[Json] = []
    if request_open:
        closing.append(protocol.request_end(StopReason.ABORTED, error_message=reason))
    if compaction is not None:
        closing.append(
            protocol.compaction_end(
                str(compaction.get("reason", "")),
                str(compaction.get("mode", "")),
                StopReason.FAILED,
                error_message=reason,
            )
        )
    closing += [placeholder_output(call_id) for call_id in unanswered]
    if closing:
        closing.append(protocol.abort_event(reason))
    return closing


def read_trace(path: str | Path) -> tuple[list[Json], list[SkippedLine]]:
    """A trace file's records (tolerantly) and the malformed lines it skipped."""
    from omni_grpc.convert import message_to_dict

    skipped: list[SkippedLine] = []
    records = [
        message_to_dict(r.message) for r in read_jsonl(path, tolerant=True, on_skip=skipped.append)
    ]
    return records, skipped


# ---- the server's restart -----------------------------------------------------

# Where the bytes of a torn last line go (beside the shard, so nothing is lost
# and the trace reader, which globs ``*.jsonl``, never sees them).
TORN_SUFFIX = ".torn"


@dataclass(frozen=True)
class Recovery:
    # Records in the shard after recovery (torn and malformed lines not counted).
    record_count: int
    # The records appended to close an interrupted run.
    closed: list[Json]
    # Bytes of a torn last line moved to ``<shard>.torn`` (0: none).
    torn_bytes: int


def set_aside_torn_tail(path: str | Path) -> int:
    """Moves an unterminated last line out of the shard; returns its size.

    A crash during an append leaves a line without its ``\\n``. A line that is
    still a whole record only gets its newline; anything else is appended to
    ``<shard>.torn`` and cut off, so the shard ends on a record boundary and
    the next append does not turn it into a malformed middle line.
    """
    from omni_grpc.convert import ConversionError, parse_message

    shard = Path(path)
    with shard.open("r+b") as fh:
        size = fh.seek(0, 2)
        if size == 0:
            return 0
        fh.seek(size - 1)
        if fh.read(1) == b"\n":
            return 0
        # The start of the last line: scan back in blocks for the previous newline.
        start, block = size, 64 * 1024
        while start > 0:
            lo = max(0, start - block)
            fh.seek(lo)
            cut = fh.read(start - lo).rfind(b"\n")
            if cut >= 0:
                start = lo + cut + 1
                break
            start = lo
        fh.seek(start)
        tail = fh.read(size - start)
        try:
            parse_message(tail.strip())
        except ConversionError:
            pass
        else:
            fh.seek(size)
            fh.write(b"\n")
            return 0
        with shard.with_name(shard.name + TORN_SUFFIX).open("ab") as aside:
            aside.write(tail + b"\n")
            aside.flush()
        fh.truncate(start)
    return len(tail)


def recover_shard(
    path: str | Path, reason: str = INTERRUPTED_REASON, *, closing: bool = True
) -> Recovery:
    """Makes a session's newest shard whole after a crash: sets a torn tail
    aside and appends :func:`closing_records` for an interrupted run (unless
    ``closing`` is False: the run is to be resumed, ``Recovery.closed`` then
    says what its close would have been)."""
    from omni_grpc.convert import message_from_dict
    from omni_grpc.trace.writer import TraceWriter

    torn = set_aside_torn_tail(path)
    records, _skipped = read_trace(path)
    closed = closing_records(records, reason)
    if not closing:
        return Recovery(len(records), closed, torn)
    if closed:
        writer = TraceWriter(path)
        for record in closed:
            writer.write(message_from_dict(record))
    return Recovery(len(records) + len(closed), closed, torn)
