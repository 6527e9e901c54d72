"""The ``replay:PATH`` engine: a recorded trace served as a live run.

For demos, UI work and load tests. The recording is split into tasks at each
user input; every run plays the session's next task (cycling), or the whole
recording with ``turns=all``. Before each complete assistant message and tool
output it synthesizes the ``partial_*`` start/delta/stop fragments a live
engine would have streamed (a recording that already holds partials, such as a
captured SSE stream, is played as it is). Messages get fresh timestamps and
otherwise pass unchanged, fidelity included.

Tool calls go through the live approval flow by default (``approvals=live``):
a denied call gets the synthetic denied output instead of the recorded one.

Options: ``delay_ms`` pause before each recorded message and each delta (default 20),
``chunk`` characters per delta (default 12), ``timing=recorded`` to also wait
the recorded gap between messages (scaled by ``speed``, capped by
``max_gap_ms``), ``turns=next|all``, ``approvals=live|recorded``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from omni_grpc.convert import message_to_dict
from omni_grpc.engines.base import ApprovalUnanswered, EngineMessage, RunOptions
from omni_grpc.engines.call_ids import RunCallIds
from omni_grpc.engines.session_past import SessionPast, session_past
from omni_grpc.protocol import builders as b
from omni_grpc.protocol.guards import is_partial_kind, payload_kind
from omni_grpc.protocol.streaming import Segment, SegmentKind, chunked
from omni_grpc.protocol.timestamps import now_timestamp
from omni_grpc.trace.formats import format_from_path, read_records
from omni_grpc.vocabulary import USER_ABORT_REASON, Decision, StopReason
from omni_grpc_proto.omni.v1 import omni_pb2

JsonObject = dict[str, Any]


@dataclass(frozen=True)
class _Recorded:
    message: omni_pb2.OmniMessage
    payload: JsonObject  # the JSON view, for reading fields
    timestamp: datetime | None


@dataclass(frozen=True)
class ReplayOptions:
    delay_ms: float = 20.0
    chunk: int = 12
    timing: str = "fixed"
    speed: float = 1.0
    max_gap_ms: float = 2000.0
    turns: str = "next"
    approvals: str = "live"


class ReplayEngine:
    # Where the cycle stands is read from the trace: a resumed run plays on.
    resumable = True
    name = "replay"

    def __init__(self, path: Path, options: ReplayOptions | None = None) -> None:
        self.path = path
        self.options = options or ReplayOptions()
        self.meta, self.tasks, self.has_partials = _load(path)

    def session_meta(self, session_id: str, workspace: Path) -> JsonObject:
        recorded = self.meta or {}
        return b.session_meta_payload(
            session_id,
            str(recorded.get("provider", "replay")),
            str(recorded.get("model_id", self.path.name)),
            recorded.get("model_context_window", "unknown"),
            str(recorded.get("system_prompt", "")),
            str(recorded.get("agent_state", "")),
            str(workspace),
        )

    async def run(
        self, input: list[JsonObject], options: RunOptions
    ) -> AsyncIterator[EngineMessage]:
        player = _Player(self, options)
        # Where the cycle stands is the session's (its trace), on any replica.
        past = await asyncio.to_thread(session_past, options, len(input))
        task = self._unique_ids(options, past, self._next_task(past))
        async for message in player.play(task):
            yield message

    def _unique_ids(
        self, options: RunOptions, past: SessionPast, task: list[_Recorded]
    ) -> list[_Recorded]:
        """The task with every tool_call_id the session already used renamed.

        Playing a recorded task again (the cycle wrapped, ``turns=all``, or a
        restart) would otherwise repeat its ids, and a resumed trace pairs
        outputs by id. The first play keeps the recorded ids.
        """
        ids = RunCallIds(set(past.call_ids))
        return [_with_message(recorded, ids.incoming(recorded.message)) for recorded in task]

    def _next_task(self, past: SessionPast) -> list[_Recorded]:
        """The recorded task after the session's last one (``turns=next``):
        the session's tasks so far, counted as the reference counts them."""
        if self.options.turns == "all":
            return [r for task in self.tasks for r in task]
        return self.tasks[past.tasks % len(self.tasks)]


class _Player:
    def __init__(self, engine: ReplayEngine, options: RunOptions) -> None:
        self.opts = engine.options
        self.synthesize = not engine.has_partials
        self.run_options = options
        self.request_open = False
        self.skip_decisions: set[str] = set()
        self.skip_outputs: set[str] = set()
        self.previous: datetime | None = None

    async def play(self, task: list[_Recorded]) -> AsyncIterator[EngineMessage]:
        for recorded in task:
            kind = recorded.payload.get("type", "")
            call_id = str(recorded.payload.get("tool_call_id", ""))
            if (kind == "approval_decision" and call_id in self.skip_decisions) or (
                kind == "tool_call_output" and call_id in self.skip_outputs
            ):
                continue
            if self.run_options.abort.is_set() or not await self._pause(recorded):
                async for message in self._aborted():
                    yield message
                return
            if self.synthesize and kind in tuple(SegmentKind) and not recorded.message.origin:
                segment = _segment_of(recorded.payload)
                async for message in self._stream(segment, recorded):
                    yield message
                if self.run_options.abort.is_set():
                    async for message in self._aborted():
                        yield message
                    return
            played = _restamped(recorded.message)
            yield played
            if kind == "request_begin":
                self.request_open = True
            elif kind == "request_end":
                self.request_open = False
            elif kind == "tool_call" and self.opts.approvals == "live":
                async for message in self._approve(played):
                    yield message

    async def _stream(self, segment: Segment, recorded: _Recorded) -> AsyncIterator[JsonObject]:
        """start, deltas, stop; on abort, the stop and complete message say ``aborted``."""
        yield segment.start()
        content = str(recorded.payload.get(segment.kind.content_key, ""))
        images = recorded.payload.get("images") or None
        for piece in chunked(content, self.opts.chunk):
            if not await self._sleep(self.opts.delay_ms):
                for message in segment.finish(StopReason.ABORTED):
                    yield message
                return
            yield segment.delta(
                piece, images if segment.kind is SegmentKind.TOOL_CALL_OUTPUT else None
            )
        yield segment.finish(str(recorded.payload.get("stop_reason", StopReason.COMPLETED)))[0]

    async def _approve(self, played: omni_pb2.OmniMessage) -> AsyncIterator[JsonObject]:
        """Asks about the tool_call as it was just streamed: the approval request
        must carry the same message, fresh timestamp included."""
        call = message_to_dict(played)
        payload = call["payload"]
        if (
            payload.get("stop_reason", StopReason.COMPLETED) != StopReason.COMPLETED
            or played.origin
        ):
            return
        call_id = str(payload.get("tool_call_id", ""))
        try:
            decision = await self.run_options.approve(call)
        except ApprovalUnanswered as why:
            # Nobody decided: the recorded decision and output are not played.
            self.skip_decisions.add(call_id)
            self.skip_outputs.add(call_id)
            yield b.unanswered_tool_output(call, why.stop_reason, why.reason)
            return
        except Exception:
            decision = Decision.DENY
        self.skip_decisions.add(call_id)
        yield b.approval_decision(decision, call_id)
        if decision != Decision.ALLOW:
            self.skip_outputs.add(call_id)
            yield b.denied_tool_output(call, decision)

    async def _aborted(self) -> AsyncIterator[JsonObject]:
        if self.request_open:
            yield b.request_end(StopReason.ABORTED)
        yield b.abort_event(self.run_options.abort.reason or USER_ABORT_REASON)

    async def _pause(self, recorded: _Recorded) -> bool:
        gap = 0.0
        if self.opts.timing == "recorded" and recorded.timestamp and self.previous:
            recorded_ms = (recorded.timestamp - self.previous).total_seconds() * 1000
            gap = min(max(recorded_ms, 0.0) / self.opts.speed, self.opts.max_gap_ms)
        self.previous = recorded.timestamp or self.previous
        return await self._sleep(gap + self.opts.delay_ms)

    async def _sleep(self, ms: float) -> bool:
        """Waits ``ms``; False when the run was aborted meanwhile."""
        abort = self.run_options.abort
        if ms <= 0:
            await asyncio.sleep(0)  # stay cancellable and fair under load
            return not abort.is_set()
        try:
            await asyncio.wait_for(abort.wait(), timeout=ms / 1000)
        except TimeoutError:
            return True
        return False


def _segment_of(payload: Mapping[str, Any]) -> Segment:
    return Segment(
        SegmentKind(str(payload["type"])),
        name=str(payload.get("name", "")),
        tool_call_id=str(payload.get("tool_call_id", "")),
    )


def _with_message(recorded: _Recorded, message: omni_pb2.OmniMessage) -> _Recorded:
    if message is recorded.message:
        return recorded
    return _Recorded(message, message_to_dict(message)["payload"], recorded.timestamp)


def _restamped(message: omni_pb2.OmniMessage) -> omni_pb2.OmniMessage:
    copy = omni_pb2.OmniMessage()
    copy.CopyFrom(message)
    copy.timestamp = now_timestamp()
    return copy


# ---- loading ----------------------------------------------------------------------


def _load(path: Path) -> tuple[JsonObject | None, list[list[_Recorded]], bool]:
    """The recorded session_meta payload, the tasks, and whether partials were recorded."""
    fmt = format_from_path(path)
    if fmt is None:
        raise ValueError(f"replay: {path}: use a .jsonl or .binpb trace")
    if not path.is_file():
        raise ValueError(f"replay: {path}: no such file")
    meta: JsonObject | None = None
    tasks: list[list[_Recorded]] = []
    current: list[_Recorded] = []
    has_partials = False
    for record in read_records(path, fmt, tolerant=True):
        kind = payload_kind(record.message)
        view = message_to_dict(record.message)
        if kind == "session_meta":
            meta = meta or view["payload"]
            continue
        payload = view["payload"]
        if _is_user_input(payload) and not record.message.origin:
            # The run's real input replaces the recorded one; it starts a new task.
            if current:
                tasks.append(current)
            current = []
            continue
        has_partials = has_partials or is_partial_kind(kind)
        current.append(_Recorded(record.message, payload, _parse_time(record.message.timestamp)))
    if current:
        tasks.append(current)
    if not tasks:
        raise ValueError(f"replay: {path}: the recording has nothing to replay")
    return meta, tasks, has_partials


def _is_user_input(payload: Mapping[str, Any]) -> bool:
    return payload.get("role") == "user" and payload.get("type") in (
        "text", "image_url", "inline_data",
    )  # fmt: skip


def _parse_time(text: str) -> datetime | None:
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def _options(raw: Mapping[str, str]) -> ReplayOptions:
    known = {"delay_ms", "chunk", "timing", "speed", "max_gap_ms", "turns", "approvals"}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ValueError(f"replay engine: unknown option(s) {', '.join(unknown)}")
    choices = {"timing": ("fixed", "recorded"), "turns": ("next", "all"),
               "approvals": ("live", "recorded")}  # fmt: skip
    for key, allowed in choices.items():
        if key in raw and raw[key] not in allowed:
            raise ValueError(f"replay engine: {key}={raw[key]!r}: use one of {', '.join(allowed)}")
    numbers: dict[str, float] = {}
    for key in ("delay_ms", "chunk", "speed", "max_gap_ms"):
        if key in raw:
            try:
                numbers[key] = float(raw[key])
            except ValueError:
                raise ValueError(f"replay engine: {key}={raw[key]!r} is not a number") from None
            if numbers[key] < 0 or (key in ("chunk", "speed") and numbers[key] <= 0):
                raise ValueError(f"replay engine: {key}={raw[key]!r} is out of range")
    defaults = ReplayOptions()
    return ReplayOptions(
        delay_ms=numbers.get("delay_ms", defaults.delay_ms),
        chunk=int(numbers.get("chunk", defaults.chunk)),
        timing=raw.get("timing", defaults.timing),
        speed=numbers.get("speed", defaults.speed),
        max_gap_ms=numbers.get("max_gap_ms", defaults.max_gap_ms),
        turns=raw.get("turns", defaults.turns),
        approvals=raw.get("approvals", defaults.approvals),
    )


def create(spec: str, **options: str) -> ReplayEngine:
    """``replay:PATH`` with ``--engine-opt`` options."""
    path = spec.removeprefix("replay:")
    if not path:
        raise ValueError("replay engine: name the recording, as replay:PATH")
    return ReplayEngine(Path(path).expanduser(), _options(options))
