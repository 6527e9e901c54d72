"""The embedded ``demo`` engine: deterministic, offline, and complete.

One prompt drives a two-request turn that exercises the whole protocol:
``tool_list_ready`` (first run of a session), then request 1 with
thinking, text and a ``list_workspace`` tool call (streamed as partials, each
followed by its complete message), the approval, ``token_usage`` and
``request_end``, the tool's streamed output (it really lists the session
workspace), and request 2 with the final answer. It honours abort at every
step: open fragments are closed as ``aborted``, then ``request_end aborted``,
then ``abort`` last. It doubles as a conformance server for client authors.

Options (``--engine-opt``): ``pacing`` seconds between deltas (default 0, for
benchmarks), ``repeat`` times the final answer is streamed (default 1).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import re
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from omni_grpc import protocol
from omni_grpc.engines.base import ApprovalUnanswered, Decision, JsonObject, RunOptions
from omni_grpc.engines.session_past import SessionPast, session_past
from omni_grpc.protocol.streaming import Segment, SegmentKind
from omni_grpc.vocabulary import USER_ABORT_REASON, StopReason

TOOL_NAME = "list_workspace"
_TOOL = protocol.tool_definition(
    TOOL_NAME,
    "List the files in the session workspace.",
    {
        "type": "object",
        "properties": {"path": {"type": "string", "description": "A directory inside it."}},
        "required": ["path"],
    },
)
_ARGUMENT_CHUNKS = ('{"path":', '"."}')
# At zero pacing, deltas produced per event-loop turn.
_DELTAS_PER_TURN = 16
_N = TypeVar("_N", int, float)
_WORD = re.compile(r"\S+\s*|\s+")
# Deltas per streamed text, at most (and one for what is left over). A text
# of up to this many characters goes word by word, as a model's tokens
# would; a longer one in runs of whole words, so a pasted log of megabytes is
# echoed in a few thousand events, not millions (no model answers with that
# many words), and its segment does not hold millions of small strings.
_DELTAS_AT_MOST = 4096


_CALL_PREFIX = "call_demo_"


class _Aborted(Exception):
    """Raised inside the run when the abort signal is seen."""


class DemoEngine:
    # Started again on a session's past when its process was lost: with no
    # carried-over input it gives the turn's answer from the recorded output.
    resumable = True
    name = "demo"

    def __init__(self, pacing: float = 0.0, repeat: int = 1) -> None:
        if not 0 <= pacing < math.inf:
            raise ValueError(f"demo engine: pacing={pacing!r} must be a finite number >= 0")
        if repeat < 1:
            raise ValueError(f"demo engine: repeat={repeat!r} must be >= 1")
        self.pacing = pacing
        self.repeat = repeat

    def session_meta(self, session_id: str, workspace: Path) -> JsonObject:
        return protocol.session_meta_payload(
            session_id,
            "omni-grpc",
            "demo",
            32768,
            "You are the omni-grpc demo engine.",
            "",
            str(workspace),
        )

    def is_read_only_tool(self, name: str) -> bool:
        return name == TOOL_NAME

    def tool_definitions(self) -> list[JsonObject]:
        return [dict(_TOOL)]

    async def run(self, input: list[JsonObject], options: RunOptions) -> AsyncIterator[JsonObject]:
        # Numbering, the tools announced and the token totals go on from the
        # session's trace, whichever replica ran its earlier runs.
        past = await asyncio.to_thread(session_past, options, len(input))
        turn = _Turn(self, options, past)
        # A resumed run with nothing carried over: its turn's call was
        # committed (and answered, by its output or the interruption's
        # placeholder); only the answer is left to give.
        going_on = None if input else await asyncio.to_thread(_left_off, options)
        try:
            if going_on is not None:
                async for msg in turn.answer(*going_on):
                    yield msg
            else:
                async for msg in turn.play(_prompt_of(input)):
                    yield msg
        except _Aborted:
            for msg in turn.close_aborted():
                yield msg

    def _count(self, turn: _Turn, output_text: str, prompt_text: str) -> JsonObject:
        request = {
            "cache_read": 0,
            "cache_write": max(1, len(prompt_text) // 4),
            "output": max(1, len(output_text) // 4),
            "total": 0,
        }
        request["total"] = request["cache_write"] + request["output"]
        turn.usage = protocol.add_token_counts(turn.usage, request)
        return protocol.token_usage(turn.usage, request)


class _Turn:
    """One run's state, so an abort can close exactly what is open."""

    def __init__(self, engine: DemoEngine, options: RunOptions, past: SessionPast) -> None:
        self.engine = engine
        self.options = options
        self.past = past
        self.usage: JsonObject = dict(past.session_usage or protocol.empty_token_counts())
        self.request_open = False
        # The segment being streamed, closed as aborted if the run stops mid-way.
        self.fragment: Segment | None = None
        self._ticks = 0

    async def _tick(self) -> None:
        """Paces the stream and notices an abort. Zero pacing still lets other tasks
        run every few deltas, as a network-bound engine would, without paying an
        event-loop turn for every delta."""
        abort = self.options.abort
        if self.engine.pacing > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(abort.wait(), self.engine.pacing)
        else:
            self._ticks += 1
            if self._ticks % _DELTAS_PER_TURN == 0:
                await asyncio.sleep(0)
        if abort.is_set():
            raise _Aborted

    async def play(self, prompt: str) -> AsyncIterator[JsonObject]:
        opts = self.options
        # Unique in the session (a resumed trace pairs outputs by id), and
        # deterministic: one past the highest the session used.
        call_id = f"{_CALL_PREFIX}{self.past.next_number(_CALL_PREFIX)}"
        if not self.past.tools_listed:
            yield protocol.tool_list_ready([_TOOL])

        # Request 1: think, say what happens next, call the tool.
        await self._tick()
        yield self._begin()
        said = "I'll list the session workspace first."
        if opts.thinking_level != "none":
            thought = f"The user wrote {prompt!r}. Listing the workspace gives a concrete answer."
            async for msg in self._segment("partial_thinking", _words(thought), whole=thought):
                yield msg
            del thought  # a megabyte prompt is not held for the rest of the turn
        async for msg in self._segment("partial_text", _words(said)):
            yield msg
        async for msg in self._segment("partial_tool_call", _ARGUMENT_CHUNKS, call_id, TOOL_NAME):
            yield msg
        call = protocol.tool_call(TOOL_NAME, "".join(_ARGUMENT_CHUNKS), call_id)
        decision: Decision | None = None
        try:
            decision = await _ask(opts, call)
        except ApprovalUnanswered as why:
            # Nobody decided (aborted, the server stopping, the wait expired):
            # no approval_decision, and the call's output says what happened.
            yield protocol.unanswered_tool_output(call, why.stop_reason, why.reason)
        else:
            yield protocol.approval_decision(decision, call_id)
            if decision != Decision.ALLOW:
                yield protocol.denied_tool_output(call, decision)
        if opts.abort.is_set():
            raise _Aborted
        yield self.engine._count(self, said, prompt)
        yield self._end(StopReason.COMPLETED)

        # The approved tool runs after the model's request ended, as in the reference.
        listing = None
        if decision == Decision.ALLOW:
            listing = _list_workspace(opts.workspace)
            async for msg in self._segment("partial_tool_call_output", [listing], call_id):
                yield msg

        async for msg in self.answer(prompt, listing):
            yield msg

    async def answer(self, prompt: str, listing: str | None) -> AsyncIterator[JsonObject]:
        """Request 2: the final answer (alone when a resumed run goes on
        after its call: ``listing`` is then the recorded output)."""
        await self._tick()
        yield self._begin()
        once = _answer(prompt, listing)
        answer = (once * self.engine.repeat).rstrip()
        # ``repeat`` lengthens the stream: each repetition is cut as one answer is.
        chunks = _words(answer, scale=len(once))
        del once
        async for msg in self._segment("partial_text", chunks, whole=answer):
            yield msg
        yield self.engine._count(self, answer, prompt)
        yield self._end(StopReason.COMPLETED)
        if self.options.abort.is_set():  # an abort that came with the last message still ends it
            raise _Aborted

    def _begin(self) -> JsonObject:
        self.request_open = True
        return protocol.request_begin()

    def _end(self, status: str) -> JsonObject:
        self.request_open = False
        return protocol.request_end(status)

    async def _segment(
        self, kind: str, chunks: Any, call_id: str = "", name: str = "", whole: str | None = None
    ) -> AsyncIterator[JsonObject]:
        """start, one delta per chunk, stop, then the complete message.
        ``whole``: the chunks joined, when the caller has that text already."""
        segment_kind = SegmentKind.of_partial(kind)
        assert segment_kind is not None, kind
        segment = self.fragment = Segment(segment_kind, name=name, tool_call_id=call_id)
        yield segment.start()
        for chunk in chunks:
            await self._tick()
            yield segment.delta(chunk)
        await self._tick()
        self.fragment = None
        if whole is not None:
            # The complete message carries the very text the deltas were cut
            # from, not a join of them: one copy of a large echo, not two.
            segment.chunks = [whole]
        for msg in segment.finish(StopReason.COMPLETED):
            yield msg

    def close_aborted(self) -> list[JsonObject]:
        out: list[JsonObject] = []
        if self.fragment is not None:
            out.extend(self.fragment.finish(StopReason.ABORTED))
            self.fragment = None
        if self.request_open:
            out.append(self._end(StopReason.ABORTED))
        out.append(protocol.abort_event(self.options.abort.reason or USER_ABORT_REASON))
        return out


async def _ask(options: RunOptions, call: JsonObject) -> Decision:
    try:
        return await options.approve(call)
    except ApprovalUnanswered:
        raise
    except Exception:  # a failing callback counts as deny (reference rule)
        return Decision.DENY


def _left_off(options: RunOptions) -> tuple[str, str | None] | None:
    """Where a resumed run with nothing carried over picks its turn up: the
    turn's prompt and its call's recorded output (the interruption's
    placeholder, if the tool did not finish) when the answer is still owed;
    None when there is no such turn (then the turn is played whole)."""
    if options.trace is None:
        return None
    prompt: str | None = None
    output: str | None = None
    answered = False
    for msg in options.trace.iter_messages():
        payload = msg.get("payload") or {}
        kind = payload.get("type")
        if msg.get("origin"):
            continue
        if kind == "text" and payload.get("role") == "user":
            prompt, output, answered = str(payload.get("text", "")), None, False
        elif kind == "tool_call_output":
            output, answered = str(payload.get("output", "")), False
        elif kind == "request_end" and payload.get("status") == StopReason.COMPLETED:
            answered = output is not None
    if prompt is None or output is None or answered:
        return None
    return prompt, output


def _prompt_of(input: list[JsonObject]) -> str:
    for msg in reversed(input):
        payload = msg.get("payload", {})
        if payload.get("type") == "text":
            return str(payload.get("text", ""))
    return ""


def _words(text: str, scale: int | None = None) -> Iterator[str]:
    """Chunks of whole words with their trailing whitespace, so they join back
    exactly; made one at a time, so a large text is not held twice over as a
    list. Each chunk but the last holds at least ``scale / _DELTAS_AT_MOST``
    characters (``scale``: the text's length, or that of the part it
    repeats), so a text of ``scale`` characters makes at most
    ``_DELTAS_AT_MOST + 1`` chunks."""
    least = -(-(len(text) if scale is None else scale) // _DELTAS_AT_MOST)
    if least <= 1:
        return (match.group() for match in _WORD.finditer(text))
    return _runs_of_words(text, least)


def _runs_of_words(text: str, least: int) -> Iterator[str]:
    start = 0
    for match in _WORD.finditer(text):
        end = match.end()
        if end - start >= least:
            yield text[start:end]
            start = end
    if start < len(text):
        yield text[start:]


def _list_workspace(workspace: Path) -> str:
    try:
        entries = sorted(workspace.iterdir(), key=lambda p: p.name)
    except OSError as exc:
        return f"[tool error] {exc.strerror or exc}"
    if not entries:
        return "(the workspace is empty)"
    lines = []
    for entry in entries:
        if entry.is_dir():
            lines.append(f"{entry.name}/")
        else:
            lines.append(f"{entry.name}\t{entry.stat().st_size} bytes")
    return "\n".join(lines)


def _answer(prompt: str, listing: str | None) -> str:
    if listing is None:
        return f"You said {prompt!r}. I was not allowed to list the workspace. "
    count = 0 if listing.startswith("(") else len(listing.splitlines())
    return f"You said {prompt!r}. The workspace holds {count} entries. "


def create(**options: str) -> DemoEngine:
    """The ``--engine demo`` factory (options arrive as strings)."""
    unknown = sorted(set(options) - {"pacing", "repeat"})
    if unknown:
        raise ValueError(f"demo engine: unknown option(s) {', '.join(unknown)}")
    pacing = _option(options, "pacing", float, "a number of seconds", 0.0)
    repeat = _option(options, "repeat", int, "a whole number", 1)
    return DemoEngine(pacing=pacing, repeat=repeat)


def _option(
    options: dict[str, str], key: str, kind: Callable[[str], _N], what: str, default: _N
) -> _N:
    raw = options.get(key)
    if raw is None:
        return default
    try:
        return kind(raw)
    except ValueError:
        raise ValueError(f"demo engine: {key}={raw!r} is not {what}") from None
