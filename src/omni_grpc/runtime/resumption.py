"""Resumption: a run goes on after the process that ran it is lost.

When a replica takes over a run whose owner stopped renewing its lease (or
a lone server restarts on its data dir with a run left open in a trace), the
run is re-driven from its trace instead of being closed, as the reference's
``resumeTrace`` reads a trace: a turn is committed by its ``request_end``
``completed``; an uncommitted turn is dropped and its input carried over; a
committed tool call without an output gets the "[interrupted: process exited
before the tool finished]" placeholder (a call still waiting for its
approval gets the unanswered output, a refused one its denied output). No
tool runs twice: a call whose output is recorded is never run again, and one
whose output is not is answered by the placeholder the model then reads.

The interruption is written into the trace and the log as the reference's
readers accept it: the open fragments stopped, the open request ended
``aborted`` with ``RESUMED_REASON``, the owed outputs; no ``abort`` (the task
goes on). The engine then starts again under the same task (the task index
keeps its record; no second ``task_state running``), with the carried-over
input as its input and the trace as its past, so every attached client reads
one stream.

Bounded: a task is resumed at most ``ResumeLimits.runs`` times and only
within ``ResumeLimits.within`` seconds of its input; past either it is
closed with ``EXHAUSTED_REASON`` (a prompt that kills its process each time
ends there). Engines declare ``resumable``; one that does not (the upstream
engines: the run lives in the upstream, which this server cannot restart)
is closed as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from omni_grpc.convert import message_from_dict, message_to_dict
from omni_grpc.engines.base import AbortSignal, Engine, JsonObject
from omni_grpc.runtime import bodies
from omni_grpc.runtime.approvals import ApprovalBroker, ApprovalMode
from omni_grpc.runtime.events import HubEvent
from omni_grpc.runtime.interface import RunRequest
from omni_grpc.runtime.recorder import Recorder, TraceRejected
from omni_grpc.runtime.recovery import (
    Numbered,
    Recovery,
    current_run,
    tail_bodies,
    unanswered_calls,
    with_stops,
)
from omni_grpc.runtime.run import Run
from omni_grpc.runtime.run_guard import RunGuard
from omni_grpc.runtime.session_index import SessionRecord
from omni_grpc.runtime.trace_store import utc_now
from omni_grpc.trace.resume import INTERRUPTED_REASON, recover_shard, resume_trace
from omni_grpc.vocabulary import AbortKind, SessionState

log = logging.getLogger(__name__)

# The interruption's words in the trace and the stream (request_end's
# error_message, the unanswered outputs): the run did not end, it goes on.
RESUMED_REASON = "interrupted: the process running the task was lost; the task goes on"
# The close of a task resumed too often, or too late.
EXHAUSTED_REASON = (
    "the task was interrupted {count} times (its process was lost each time); "
    "not resumed again: it ends here"
)
TOO_LATE_REASON = (
    "the task was interrupted {age:.0f} s after it started, past the {within:g} s "
    "it may be resumed within; it ends here"
)
DEFAULT_RESUME_RUNS = 3
DEFAULT_RESUME_WITHIN = 3600.0
# Beside the session's first shard: the task's options (thinking level,
# approval mode, metadata), which a resumed run takes again.
OPTIONS_SUFFIX = ".run.json"

_USER_INPUT = frozenset({"text", "image_url", "inline_data"})


@dataclass(frozen=True)
class ResumeLimits:
    """``runs``: resumptions a task may have (0: never resumed);
    ``within``: seconds from the task's input past which it is not."""

    runs: int = DEFAULT_RESUME_RUNS
    within: float = DEFAULT_RESUME_WITHIN

    @property
    def enabled(self) -> bool:
        return self.runs > 0


def can_resume(engine: Engine) -> bool:
    """Whether the engine declared it can be started again on a session's past."""
    return bool(getattr(engine, "resumable", False))


def _payload(msg: Mapping[str, Any]) -> Mapping[str, Any]:
    payload = msg.get("payload")
    return payload if isinstance(payload, Mapping) else {}


def _is_task_input(msg: Mapping[str, Any]) -> bool:
    payload = _payload(msg)
    return (
        msg.get("type") == "model_msg"
        and not msg.get("origin")
        and payload.get("role") == "user"
        and payload.get("type") in _USER_INPUT
    )


def _owes_a_turn(records: Sequence[Mapping[str, Any]]) -> bool:
    """The trace ends with a tool's output: the model has yet to read it."""
    for msg in reversed(records):
        if msg.get("origin"):
            continue
        return _payload(msg).get("type") == "tool_call_output"
    return False


def carry_over(records: Sequence[Mapping[str, Any]]) -> list[JsonObject]:
    """The engine's input when the task goes on: the user input of the turn
    the interruption dropped (the reference's carry-over). Tool outputs are
    not input: the engine reads them (placeholders included) in the trace."""
    return [dict(m) for m in resume_trace(records).carry_over if _is_task_input(m)]


def refusal(limits: ResumeLimits, task: TaskOptions, now: float | None = None) -> str | None:
    """Why the task is not resumed again (its close's reason), or None."""
    if task.resumed >= limits.runs:
        return EXHAUSTED_REASON.format(count=task.resumed + 1)
    age = (time.time() if now is None else now) - task.started
    if task.started and age > limits.within:
        return TOO_LATE_REASON.format(age=age, within=limits.within)
    return None


def marks(guard: RunGuard) -> list[JsonObject]:
    """The interruption as the trace and the stream record it: what the lost
    process left open closed, ``request_end`` ``aborted`` with
    ``RESUMED_REASON``, every owed output; no ``abort``, the task goes on."""
    closing = guard.closing_messages(
        aborted=True, reason=RESUMED_REASON, error=RESUMED_REASON, answer_calls=True
    )
    return [m for m in closing if _payload(m).get("type") != "abort"]


# ---- the task's options ---------------------------------------------------------


def options_path(first_shard: Path) -> Path:
    return first_shard.with_name(first_shard.name + OPTIONS_SUFFIX)


@dataclass(frozen=True)
class TaskOptions:
    """What a resumed run takes again: the task's request (its input aside),
    when the task started (wall clock, any replica's) and how many times it
    was resumed so far. Written by the lease holder only."""

    request: RunRequest
    started: float = 0.0
    resumed: int = 0


def save_options(first_shard: Path, task: TaskOptions) -> None:
    """Kept beside the trace so whichever process resumes the task runs it as
    it was asked (its thinking level, approval mode and metadata), and
    counts its resumptions across processes."""
    request = task.request
    data = {
        "thinking_level": request.thinking_level,
        "approval_mode": request.approval_mode.value if request.approval_mode else None,
        "metadata": request.metadata,
        "message_id": request.message_id,
        "started": task.started,
        "resumed": task.resumed,
    }
    path = options_path(first_shard)
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(json.dumps(data), encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    with contextlib.suppress(FileNotFoundError):
        _stale(path).unlink()


def forget_options(first_shard: Path) -> None:
    """Sets the options of an earlier task aside, for when this task's could
    not be written (a full disk): a resumption then runs with the defaults and
    counts from nothing, never with another task's options and count. Renamed,
    not removed: a rename needs no space and frees none, so the server does
    not change how full the disk is (the next write of options removes it;
    a session's delete removes everything beside its trace)."""
    path = options_path(first_shard)
    with contextlib.suppress(FileNotFoundError):
        os.replace(path, _stale(path))


def _stale(path: Path) -> Path:
    return path.with_name(path.name + ".stale")


def load_options(first_shard: Path, session_id: str) -> TaskOptions:
    """The task's options; defaults (and no start time: no age limit) when
    the file is missing or unreadable."""
    try:
        data = json.loads(options_path(first_shard).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        data = {}
    if not isinstance(data, dict):
        data = {}

    def text(key: str) -> str | None:
        value = data.get(key)
        return value if isinstance(value, str) else None

    mode = text("approval_mode")
    metadata = data.get("metadata")
    started = data.get("started")
    resumed = data.get("resumed")
    request = RunRequest(
        input=[],
        session_id=session_id,
        thinking_level=text("thinking_level"),
        approval_mode=ApprovalMode(mode) if mode else None,
        metadata=metadata if isinstance(metadata, dict) else {},
        message_id=text("message_id"),
    )
    return TaskOptions(
        request,
        float(started) if isinstance(started, (int, float)) else 0.0,
        resumed if isinstance(resumed, int) else 0,
    )


# ---- re-driving ---------------------------------------------------------------------

StartResumed = Callable[[Run, list[JsonObject], RunRequest], None]


class Resumption:
    """Re-drives a run taken over (``take_over``, Recovery's hook)."""

    def __init__(
        self,
        engine: Engine,
        limits: ResumeLimits,
        recorder: Recorder,
        recovery: Recovery,
        start: StartResumed,
    ) -> None:
        self.engine = engine
        self.limits = limits
        self.recorder = recorder
        self.recovery = recovery
        self.start = start
        self.resumed = 0  # runs this process re-drove (tests, logs)

    @property
    def active(self) -> bool:
        return self.limits.enabled and can_resume(self.engine)

    async def take_over(
        self,
        run: Run,
        recorded: list[JsonObject],
        tail: Sequence[Numbered],
        window: list[HubEvent],
        *,
        restarted: bool = False,
    ) -> bool | str:
        """True: the run goes on here (it was started); False: close it as
        before; a reason: close it with that reason (its limits are spent).
        ``run`` holds the take-over's lease, its trace fenced; ``tail``: the
        trace's records the log never got; ``window``: the log's."""
        if not self.active:
            return False
        if not any(_is_task_input(m) for m in recorded):
            return False
        guard = RunGuard()
        if restarted:
            # The log started empty: what the run left open is the trace's,
            # from the task's input on.
            start = max(i for i, m in enumerate(recorded) if _is_task_input(m))
            for item in recorded[start:]:
                guard.observe(item)
        for event in current_run(window):
            if (message := event.message) is not None:
                guard.observe(message)
        caught_up = with_stops(guard, tail)
        if recorded:
            guard.calls = unanswered_calls(recorded)
        closing = [message_from_dict(m) for m in marks(guard)]
        first_shard = self.recorder.traces.paths(run.record)[0]
        task = await asyncio.to_thread(load_options, first_shard, run.session_id)
        refused = refusal(self.limits, task)
        if refused is not None:
            log.error("session %s: %s", run.session_id, refused)
            return refused
        engine_input = carry_over(recorded + [message_to_dict(m) for m in closing])
        if not closing and not engine_input and not _owes_a_turn(recorded):
            # Nothing was left open and no output waits for the model: the
            # task's last turn ended; started again, an engine would answer
            # a second time. It is closed as before.
            return False
        log.warning(
            "session %s: resuming the task (resumption %d of at most %d)",
            run.session_id, task.resumed + 1, self.limits.runs,
        )  # fmt: skip
        # Counted before the engine starts: a process lost again meanwhile
        # still counts this one (a poison prompt ends within the limit).
        try:
            await asyncio.to_thread(
                save_options, first_shard, replace(task, resumed=task.resumed + 1)
            )
        except OSError as exc:
            # Uncounted, a run that kills its process would be resumed for ever.
            reason = f"the task could not be resumed: its resumption count was not written ({exc})"
            log.error("session %s: %s", run.session_id, reason)
            return reason
        out = tail_bodies(caught_up, AbortKind.REPLICA_LOST)
        for msg in closing:
            body = bodies.message_body(msg)
            try:
                written = await self.recorder.append(run, msg, body.data)
            except TraceRejected:
                return False  # the trace takes no mark: closed as before
            # A record numbered as the trace numbered it (the log takes the
            # journal's next); a fragment's stop is published as it is.
            out.append(self.recorder.numbered(run, body) if written else body)
        await self.recorder.count(run)
        if restarted:
            # A lone server's log started empty: the task is running again.
            await run.log.publish(
                bodies.task_state_body(SessionState.RUNNING), fence=run.lease.token
            )
        if out:
            await run.log.publish_many(out, fence=run.lease.token)
        # The lost process's asks were answered by the marks; the resumed
        # engine asks again where the approval policy would.
        await self.recovery.backend.approvals.clear(run.session_id)
        self.resumed += 1
        self.start(run, engine_input, task.request)
        return True

    async def restarted(self) -> None:
        """A lone server restarted on its data dir: the runs its trace left
        open (``Recovery.restore`` left them so) go on, or are closed as a
        restart closed them before when they cannot."""
        recovery = self.recovery
        while recovery.restarted:
            record = recovery.restarted.pop(0)
            try:
                await self._restart_one(record)
            except Exception:
                log.exception("session %s: resuming its run after the restart failed",
                              record.session_id)  # fmt: skip

    async def _restart_one(self, record: SessionRecord) -> None:
        recovery = self.recovery
        session_id = record.session_id
        lease = await recovery.backend.leases.acquire(session_id, recovery.replica_id)
        if lease is None:
            return  # a run started meanwhile: it closes the trace first (``unclosed``)
        run = Run(
            record, lease, recovery.backend.logs.get(session_id), AbortSignal(),
            ApprovalBroker(session_id),
        )  # fmt: skip
        recovery.keeper.keep(run)
        outcome: bool | str = False
        try:
            recorded = await asyncio.to_thread(self.recorder.traces.view(record).messages)
            outcome = await self.take_over(run, recorded, [], [], restarted=True)
        finally:
            if outcome is not True:
                recovery.keeper.drop(run)
        if outcome is True:
            return
        reason = outcome if isinstance(outcome, str) else INTERRUPTED_REASON
        path = self.recorder.traces.paths(record)[-1]
        self.recorder.traces.forget(record)
        closed = await asyncio.to_thread(recover_shard, path, reason)
        if closed.closed:
            count = record.message_count + len(closed.closed)
            await recovery.backend.index.recorded(session_id, count, utc_now())
        await recovery.backend.leases.release(lease)
