"""Keeps the task index up to date as runs go: a run is written when it starts,
when it waits for a decision and goes on, and when it ends.

Only changes of state are written (a handful per run, never one per message):
what happened in between is the trace's (``TaskRecord.first_record`` to
``last_record``) and, while it lasts, the replay window's. ``task_end`` is the
one rule for how a run ended; the A2A view folds its events by it too.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace

from omni_grpc.runtime.errors import BackendUnavailable
from omni_grpc.runtime.events import EventBody, HubEvent
from omni_grpc.runtime.task_index import TaskIndex, TaskRecord
from omni_grpc.runtime.trace_store import utc_now
from omni_grpc.vocabulary import AbortKind, TaskStatus
from omni_grpc_proto.omni.v1 import omni_pb2

log = logging.getLogger(__name__)

_CANCELED_BY = frozenset({AbortKind.USER, AbortKind.CLIENT_GONE})
_STOP_WORDS = {
    omni_pb2.STOP_REASON_FAILED: "failed",
    omni_pb2.STOP_REASON_ABORTED: "aborted",
    omni_pb2.STOP_REASON_TIMEOUT: "timed out",
    omni_pb2.STOP_REASON_MALFORMED: "malformed",
    omni_pb2.STOP_REASON_AUTH: "not authorized",
}


def request_failure(end: omni_pb2.RequestEnd) -> str | None:
    """Why a ``request_end`` failed; None when it completed."""
    if end.status == omni_pb2.STOP_REASON_COMPLETED:
        return None
    word = _STOP_WORDS.get(end.status, "failed")
    return end.error_message or end.message or f"the request {word}"


def task_end(
    failure: str | None,
    abort: tuple[AbortKind | None, str] | None,
    failed_request: str | None,
) -> tuple[TaskStatus, str | None]:
    """How a run ended, and why when it did not complete: a failure the server
    reported, else its abort (canceled when someone asked for it or its client
    went away), else its last model request's failure, else completed."""
    if failure is not None:
        return TaskStatus.FAILED, failure
    if abort is not None:
        kind = abort[0] or AbortKind.USER
        return (TaskStatus.CANCELED if kind in _CANCELED_BY else TaskStatus.FAILED), abort[1]
    if failed_request is not None:
        return TaskStatus.FAILED, failed_request
    return TaskStatus.COMPLETED, None


@dataclass
class TaskFold:
    """What ``task_end`` needs of a run, from the messages it published."""

    abort: tuple[AbortKind | None, str] | None = None
    failed_request: str | None = None
    record: TaskRecord | None = None
    asking: set[str] = field(default_factory=set)
    # The newest message's timestamp: a record's times are its messages', as
    # the A2A view's status timestamps are (a server event has none).
    stamp: str = ""
    # The run's newest event its owner knows to be out.
    published: str | None = None

    def now(self) -> str:
        return self.stamp or utc_now()

    def message(self, msg: omni_pb2.OmniMessage, kind: AbortKind | None) -> None:
        if msg.timestamp:
            self.stamp = msg.timestamp
        if msg.origin:
            return
        arm = msg.WhichOneof("payload")
        if arm == "abort":
            self.abort = (kind, msg.abort.reason or "aborted")
        elif arm == "request_end":
            self.failed_request = request_failure(msg.request_end)

    def body(self, body: EventBody) -> None:
        if body.payload_arm is not None:
            msg = body.decoded_message
            if msg is not None:
                self.message(msg, body.abort_kind)


class TaskLedger:
    def __init__(self, tasks: TaskIndex) -> None:
        self.tasks = tasks

    async def started(
        self, fold: TaskFold, session_id: str, first: HubEvent, message_id: str | None,
        first_record: int | None,
    ) -> None:  # fmt: skip
        now = fold.now()
        fold.record = TaskRecord(
            session_id=session_id,
            event_id=first.event_id,
            state=TaskStatus.WORKING,
            started_at=now,
            updated_at=now,
            last_event_id=first.event_id,
            first_record=first_record,
            message_id=message_id,
        )
        await self.tasks.put(fold.record)

    async def newest(self, session_id: str) -> TaskRecord | None:
        """The session's newest task, if it has not ended (a resumed run's)."""
        try:
            newest, _ = await self.tasks.page(session_id=session_id, limit=1)
        except BackendUnavailable:
            return None
        if not newest or TaskStatus(newest[0].state).ended:
            return None
        return newest[0]

    async def asked(self, fold: TaskFold, tool_call_id: str) -> None:
        fold.asking.add(tool_call_id)
        await self._now(fold, TaskStatus.INPUT_REQUIRED, None)

    async def decided(self, fold: TaskFold, tool_call_id: str) -> None:
        fold.asking.discard(tool_call_id)
        if not fold.asking:
            await self._now(fold, TaskStatus.WORKING, None)

    async def _now(self, fold: TaskFold, state: TaskStatus, event_id: str | None) -> None:
        record = fold.record
        if record is None or record.state == state:
            return
        fold.record = replace(
            record,
            state=state,
            updated_at=fold.now(),
            last_event_id=event_id or record.last_event_id,
        )
        await self.tasks.put(fold.record)

    async def ended(
        self,
        session_id: str,
        fold: TaskFold,
        closing: list[EventBody],
        failure: str | None,
        last_event_id: str | None,
        last_record: int | None,
    ) -> None:
        """The run's end, written before its ``task_state idle`` is published
        (a client that saw the end finds the record ended). Its record is the
        fold's (the owner's), else the session's newest (a run another replica
        closes). A backend that fails here leaves the record as it was: the
        end is published all the same, and the window tells it."""
        for body in closing:
            fold.body(body)
        state, reason = task_end(failure, fold.abort, fold.failed_request)
        try:
            record = fold.record
            if record is None:
                newest, _ = await self.tasks.page(session_id=session_id, limit=1)
                if not newest or TaskStatus(newest[0].state).ended:
                    return  # the run never got as far as its record
                record = newest[0]
            fold.record = replace(
                record,
                state=state,
                updated_at=fold.now(),
                last_event_id=last_event_id or fold.published or record.last_event_id,
                last_record=last_record,
                reason=reason,
            )
            await self.tasks.put(fold.record)
        except BackendUnavailable as exc:
            log.warning("session %s: the task index missed the run's end: %s", session_id, exc)
