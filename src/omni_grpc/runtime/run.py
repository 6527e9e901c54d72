"""A run this process executes: the state its task, its recorder and its
recovery share (the holder of the session's run lease)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from omni_grpc.engines.base import AbortSignal
from omni_grpc.runtime.approvals import ApprovalBroker
from omni_grpc.runtime.event_log import EventLog
from omni_grpc.runtime.events import HubEvent
from omni_grpc.runtime.observer import RunObservation
from omni_grpc.runtime.run_guard import RunGuard
from omni_grpc.runtime.run_lease import Claim, Lease
from omni_grpc.runtime.session_index import SessionRecord
from omni_grpc.runtime.task_ledger import TaskFold


@dataclass
class Run:
    """A task this process executes (the holder of the session's run lease)."""

    record: SessionRecord
    lease: Lease
    log: EventLog
    abort: AbortSignal
    approvals: ApprovalBroker
    guard: RunGuard = field(default_factory=RunGuard)
    # What the observer hears of the run.
    observed: RunObservation = field(default_factory=RunObservation)
    task: asyncio.Task[None] | None = None
    # Set once the lease is lost: nothing more is written, anywhere.
    lost: bool = False
    # The last event queued with publish_nowait (its failure stops the run).
    last_publish: asyncio.Future[HubEvent] | None = None
    # The background writer of the trace's record count to the index
    # (``Recorder.count_soon``), whether a newer count waits for it, and the
    # lock that keeps its write and the final one in order.
    counting: asyncio.Task[None] | None = None
    count_dirty: bool = False
    count_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # How the run stands, for the task index (``task_ledger``).
    tasks: TaskFold = field(default_factory=TaskFold)

    @property
    def session_id(self) -> str:
        return self.record.session_id


@dataclass
class Starting:
    """A run claimed but not started yet (its subscription is being opened):
    an abort meant for it (a delete's, a command carrying its token) is kept
    in the signal the run then takes over, rather than missed."""

    claim: Claim
    abort: AbortSignal = field(default_factory=AbortSignal)
