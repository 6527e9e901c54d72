"""Windows of a session's history, cut where a reference client can start drawing.

``GET /api/sessions/{id}/messages?tailLimit=N`` (and ``before=<cursor>&limit=N``)
returns the last N *units* before a point instead of the whole transcript. A
unit is one task as the reference web client segments it: it opens at a
task-starting user prompt of the main session and runs to the next one. Cutting
only there keeps every pairing whole: a ``tool_call`` and its output, a
compaction span, a steering message and the images behind it, and a task that
crossed a shard rotation all stay inside one window.

The rules, as the reference client applies them:

* A user ``text`` or ``image_url`` starts a task, except a compaction summary
  (``[context_summary]``), a steering block (``[user_steering]`` ...
  ``[/user_steering]``), images that follow a steering block, and anything
  inside a compaction span.
* Consecutive prompts of one send form one unit: a new unit opens only when
  something the client draws came in between (a non-blank reply or thought, a
  tool call, a compaction, an abort, a retried request, a steering block), or
  the previous task ended with a reply or token usage (its stats row).

``prior`` says what the client would have counted before the window, so its
numbering and totals equal a full load (see :class:`PriorTotals`).

Positions are ``(fileIndex, ordinal)``: the shard's number (``_001`` is 1) and
the record's 0-based place among the shard's parsed records. Shards are
append-only and a rotation opens a new one, so a position never moves; the
cursor ``"<fileIndex>:<ordinal>"`` is stable across requests and compactions.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from omni_grpc_proto.omni.v1 import omni_pb2

CURSOR = re.compile(r"^(\d{1,9}):(\d{1,9})$")
_STEERING = re.compile(r"^\[user_steering\]\n[\s\S]*?\n\[/user_steering\]\s*$")
_SUMMARY_PREFIXES = ("[context_summary]", "<context_summary>")
_RETRIED = frozenset(
    {omni_pb2.STOP_REASON_FAILED, omni_pb2.STOP_REASON_TIMEOUT, omni_pb2.STOP_REASON_MALFORMED}
)

Position = tuple[int, int]  # (fileIndex, ordinal)
# UnitScan.pack: turns, elapsed, session and context tokens, the open task's
# first, last and last request_end millis, flags.
_STATE = struct.Struct("<qqqqqqqH")
STATE_BYTES = _STATE.size


@dataclass
class PriorTotals:
    """What came before a window.

    * ``turns``: units before it (the client's turn numbering offset).
    * ``elapsed_ms``: the summed duration of the tasks before it, each from its
      first record to its last ``request_end`` outside a compaction (or its
      last record when it has none); compaction records do not extend a task.
    * ``session_tokens``: the last ``token_usage.session.total`` before it.
    * ``context_tokens``: the last ``token_usage.request.total`` before it that
      was not a compaction's.
    * ``subagent_tokens``: always 0. The reference adds up the child sessions'
      own traces; a bridge records no child traces (messages with an origin
      are never written), so there is nothing to add.
    """

    turns: int = 0
    subagent_tokens: int = 0
    elapsed_ms: int = 0
    session_tokens: int = 0
    context_tokens: int = 0

    def to_json(self) -> dict[str, int]:
        return {
            "subagentTokens": self.subagent_tokens,
            "elapsedMs": self.elapsed_ms,
            "sessionTokens": self.session_tokens,
            "contextTokens": self.context_tokens,
        }


@dataclass
class Window:
    # The window's records, each with its position, in trace order.
    messages: list[tuple[Position, omni_pb2.OmniMessage]]
    # The first unit's position: pass it back as ``before``. None when the
    # window reaches the start of the history.
    before: Position | None
    prior: PriorTotals


def parse_cursor(raw: str) -> Position | None:
    match = CURSOR.match(raw)
    if match is None:
        return None
    return int(match.group(1)), int(match.group(2))


def format_cursor(position: Position) -> str:
    return f"{position[0]}:{position[1]}"


def positioned(
    shards: list[tuple[int, list[omni_pb2.OmniMessage]]],
) -> list[tuple[Position, omni_pb2.OmniMessage]]:
    """Every record of the shards with its position."""
    return [((index, i), msg) for index, messages in shards for i, msg in enumerate(messages)]


def window(
    records: list[tuple[Position, omni_pb2.OmniMessage]],
    limit: int,
    before: Position | None = None,
) -> Window:
    """The last ``limit`` units of ``records`` that start before ``before``
    (all of them when ``before`` is None).

    When the units before the end number ``limit`` or fewer, the window starts
    at the very first record (the ``session_meta`` included) and has no
    ``before``. A cursor into a shard that does not exist gives an empty window.
    """
    end = len(records)
    if before is not None:
        if not any(pos[0] == before[0] for pos, _ in records):
            return Window([], None, PriorTotals())
        end = next((i for i, (pos, _) in enumerate(records) if pos >= before), len(records))
    scan = UnitScan()
    starts: list[tuple[int, PriorTotals]] = []
    for i in range(end):
        if scan.feed(records[i][1]):
            starts.append((i, scan.unit_prior))
    if len(starts) <= limit:
        return Window(records[:end], None, PriorTotals())
    first, prior = starts[len(starts) - limit]
    return Window(records[first:end], records[first][0], prior)


@dataclass
class _Task:
    first_ms: int = 0
    last_ms: int = 0
    last_request_end_ms: int | None = None
    drew_stats: bool = False  # a reply or usage: the client closes it with a stats row
    pending_compaction_usage: bool = False


@dataclass
class UnitScan:
    """Feeds records in trace order and says where units start. Its state
    after any record packs into :data:`STATE_BYTES` bytes (:meth:`pack`), so
    the trace index (``trace/index.py``) can continue a scan from anywhere."""

    totals: PriorTotals = field(default_factory=PriorTotals)
    task: _Task | None = None
    in_compaction: bool = False
    steering_open: bool = False
    # Inside a run of prompts with nothing drawn between them (one send).
    prompt_run: bool = False
    # The totals before the unit the last True from feed() started.
    unit_prior: PriorTotals = field(default_factory=PriorTotals)

    def snapshot(self) -> PriorTotals:
        t = self.totals
        return PriorTotals(
            t.turns, t.subagent_tokens, t.elapsed_ms, t.session_tokens, t.context_tokens
        )

    def pack(self) -> bytes:
        """The state that decides what the next records do (not ``unit_prior``,
        which only the record that starts a unit reads)."""
        t, task = self.totals, self.task
        flags = sum(
            bit
            for bit, on in (
                (1, task is not None),
                (2, task is not None and task.drew_stats),
                (4, task is not None and task.pending_compaction_usage),
                (8, task is not None and task.last_request_end_ms is not None),
                (16, self.in_compaction),
                (32, self.steering_open),
                (64, self.prompt_run),
            )
            if on
        )
        first, last, end = (
            (task.first_ms, task.last_ms, task.last_request_end_ms or 0)
            if task is not None
            else (0, 0, 0)
        )
        return _STATE.pack(
            t.turns, t.elapsed_ms, t.session_tokens, t.context_tokens, first, last, end, flags
        )

    @classmethod
    def unpack(cls, data: bytes) -> UnitScan:
        turns, elapsed, session, context, first, last, end, flags = _STATE.unpack(data)
        scan = cls(PriorTotals(turns, 0, elapsed, session, context))
        if flags & 1:
            scan.task = _Task(first, last, end if flags & 8 else None, bool(flags & 2))
            scan.task.pending_compaction_usage = bool(flags & 4)
        scan.in_compaction = bool(flags & 16)
        scan.steering_open = bool(flags & 32)
        scan.prompt_run = bool(flags & 64)
        return scan

    def feed(self, msg: omni_pb2.OmniMessage) -> bool:
        """Takes the next record; True when a new unit starts at it (the totals
        then hold everything before it)."""
        if len(msg.origin) > 0:
            return False  # never recorded; ignored rather than miscounted
        kind = msg.WhichOneof("payload") or ""
        ms = _millis(msg.timestamp)
        if kind != "image_url":
            self.steering_open = False
        handler = getattr(self, f"_on_{kind}", None)
        if handler is None:
            self._touch(ms)
            return False
        starts: bool = handler(getattr(msg, kind), ms)
        return starts

    # ---- model messages ------------------------------------------------------

    def _on_text(self, p: Any, ms: int | None) -> bool:
        if self.in_compaction:
            self._touch(ms)
            return False
        # Read once: each read of a protobuf string field builds a new str, and
        # the text may be megabytes.
        text = p.text
        if p.role == omni_pb2.ROLE_USER:
            if text.startswith(_SUMMARY_PREFIXES):
                self._touch(ms)
                return False
            if _STEERING.match(text):
                self._touch(ms)
                self.prompt_run = False
                self.steering_open = True
                return False
            return self._prompt(ms)
        self._touch(ms)
        if _has_words(text):
            if self.task is not None:
                self.task.drew_stats = True
            self.prompt_run = False
        return False

    def _on_image_url(self, _p: Any, ms: int | None) -> bool:
        if self.in_compaction or self.steering_open:
            self._touch(ms)
            return False
        return self._prompt(ms)

    def _on_thinking(self, p: Any, ms: int | None) -> bool:
        self._touch(ms)
        if not self.in_compaction and _has_words(p.thinking):
            self.prompt_run = False
        return False

    def _on_tool_call(self, _p: Any, ms: int | None) -> bool:
        self._touch(ms)
        if not self.in_compaction:
            self.prompt_run = False
        return False

    # ---- events --------------------------------------------------------------

    def _on_compaction_begin(self, _p: Any, ms: int | None) -> bool:
        self._touch(ms)
        self.in_compaction = True
        self.prompt_run = False
        return False

    def _on_compaction_end(self, _p: Any, ms: int | None) -> bool:
        self._touch(ms)
        self.in_compaction = False
        return False

    def _on_abort(self, _p: Any, ms: int | None) -> bool:
        self._touch(ms)
        self.prompt_run = False
        return False

    def _on_request_end(self, p: Any, ms: int | None) -> bool:
        self._touch(ms)
        if self.in_compaction:
            return False
        if self.task is not None:
            if ms is not None:
                self.task.last_request_end_ms = ms
            if self.task.pending_compaction_usage:
                self.task.drew_stats = True
                self.task.pending_compaction_usage = False
        if p.status in _RETRIED:
            self.prompt_run = False
        return False

    def _on_token_usage(self, p: Any, ms: int | None) -> bool:
        self._touch(ms)
        self.totals.session_tokens = int(p.session.total)
        if self.in_compaction:
            if self.task is not None:
                self.task.pending_compaction_usage = True
        else:
            self.totals.context_tokens = int(p.request.total)
            if self.task is not None:
                self.task.drew_stats = True
        return False

    def _on_session_meta(self, _p: Any, _ms: int | None) -> bool:
        return False

    # ---- tasks ---------------------------------------------------------------

    def _prompt(self, ms: int | None) -> bool:
        if self.task is not None and self.task.drew_stats:
            self.prompt_run = False
        starts = not self.prompt_run
        self._finish_task()
        self.task = _Task(first_ms=ms or 0, last_ms=ms or 0)
        if starts:
            self.unit_prior = self.snapshot()  # the unit itself is not prior to it
            self.totals.turns += 1
            self.prompt_run = True
        return starts

    def _touch(self, ms: int | None) -> None:
        if self.task is not None and not self.in_compaction and ms is not None:
            self.task.last_ms = max(self.task.last_ms, ms)

    def _finish_task(self) -> None:
        task = self.task
        if task is None:
            return
        end = task.last_request_end_ms if task.last_request_end_ms is not None else task.last_ms
        self.totals.elapsed_ms += max(0, end - task.first_ms)
        self.task = None


def _millis(timestamp: str) -> int | None:
    try:
        moment = datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        return None
    return (moment - _EPOCH) // timedelta(milliseconds=1)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _has_words(text: str) -> bool:
    """``text.strip()`` is not empty, without building the stripped copy."""
    return bool(text) and not text.isspace()
