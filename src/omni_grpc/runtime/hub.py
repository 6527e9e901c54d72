"""The session hub: the facade transports call, over the runtime's parts.

Transports call the hub and render what its subscriptions yield; they never
number, buffer or record events themselves. The hub checks a request, claims
the session's run lease and hands the run to its task (``run_task``), which
records through the ``recorder`` and publishes to the session's event log;
``recovery`` closes the runs that did not end the ordinary way, and
``retention`` ends sessions (DeleteSession, ``--session-ttl``).

What another replica needs (sessions, who runs what, pending approvals, the
events) is in the backend (``runtime.backend``); the hub keeps only the runs
this process executes: their tasks, abort signals and approval futures.
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import secrets
import socket
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import replace
from pathlib import Path

from omni_grpc.engines.base import AbortSignal, Engine, RetriesRequests
from omni_grpc.runtime import bodies
from omni_grpc.runtime.approvals import ApprovalBroker, ApprovalMode, default_client_modes
from omni_grpc.runtime.backend import Backend, memory_backend
from omni_grpc.runtime.call_context import DEADLINE_REASON, CallContext
from omni_grpc.runtime.commands import Commands
from omni_grpc.runtime.errors import (
    BackendUnavailable,
    CallEnded,
    HubClosed,
    InvalidRequest,
    LimitExceeded,
    ModeNotAllowed,
    Overloaded,
    SessionBusy,
    SessionNotFound,
)
from omni_grpc.runtime.event_log import Subscription
from omni_grpc.runtime.events import EventBody, HubEvent
from omni_grpc.runtime.health import DRAINING, HealthState
from omni_grpc.runtime.idempotency import IdempotencyKeys
from omni_grpc.runtime.interface import ApprovalPolicy, RunRequest, SessionInfo
from omni_grpc.runtime.limits import OVERLOAD_MIN_RUNS, Limits
from omni_grpc.runtime.live_tail import LiveTail, fold_live_tail
from omni_grpc.runtime.loop_load import LoopLoad
from omni_grpc.runtime.memory_log import MemoryEventLog
from omni_grpc.runtime.new_sessions import NewSessions
from omni_grpc.runtime.observer import HubObserver
from omni_grpc.runtime.recorder import Recorder
from omni_grpc.runtime.recovery import BACKEND_LOST_REASON, Recovery, current_run
from omni_grpc.runtime.resumption import ResumeLimits, Resumption
from omni_grpc.runtime.retention import Retention
from omni_grpc.runtime.run import Run, Starting
from omni_grpc.runtime.run_input import check_input, stamped
from omni_grpc.runtime.run_lease import Claim
from omni_grpc.runtime.run_task import RunTasks, abort_local
from omni_grpc.runtime.session_index import SessionRecord
from omni_grpc.runtime.session_infos import session_infos
from omni_grpc.runtime.stream_slots import StreamSlots
from omni_grpc.runtime.task_index import TaskRecord
from omni_grpc.runtime.trace_store import TraceStore
from omni_grpc.trace.paths import SESSION_ID_RULE, is_session_id
from omni_grpc.trace.window import Position, Window
from omni_grpc.vocabulary import AbortKind, Decision, SessionLifecycle, SessionState
from omni_grpc_proto.omni.v1 import omni_pb2

__all__ = ["BACKEND_LOST_REASON", "Hub", "RunRequest", "SessionInfo"]

log = logging.getLogger(__name__)


# Builds a session's event log (tests); the default comes from the backend.
LogFactory = Callable[[str], MemoryEventLog]


class Hub:
    def __init__(
        self,
        engine: Engine,
        data_dir: Path,
        *,
        default_approval: ApprovalMode = ApprovalMode.ALLOW_ALL,
        client_modes: tuple[ApprovalMode, ...] | None = None,
        backend: Backend | None = None,
        log_factory: LogFactory | None = None,
        abort_grace: float = 10.0,
        replica_id: str | None = None,
        observer: HubObserver | None = None,
        limits: Limits | None = None,
        resume: ResumeLimits | None = None,
    ) -> None:
        self.engine = engine
        self.limits = limits or Limits()
        self.loop_load = LoopLoad()
        self.observer = observer or HubObserver()
        self.traces = TraceStore(data_dir, writer=self.observer.trace_writer)
        self.default_approval = default_approval
        # The approval modes a run may ask for (a policy: wider ones are refused).
        self.client_modes = client_modes or default_client_modes(default_approval)
        self.backend = backend or memory_backend(log_factory=log_factory)
        self.backend.logs.observe(self.observer.event_log)
        # Names this process in run leases and the control channel.
        # Named for an operator reading a take-over's reason: host, pid, and
        # a random part, unique across restarts.
        self.replica_id = replica_id or (
            f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"
        )
        self.health = HealthState()
        self.recorder = Recorder(engine, self.traces, self.backend, self.health)
        self.recovery = Recovery(self.backend, self.recorder, self.health, self.replica_id)
        self.tasks = RunTasks(
            engine,
            self.backend,
            self.recorder,
            self.recovery,
            self.observer,
            default_approval=default_approval,
            abort_grace=abort_grace,
        )
        self._runs = self.tasks.runs
        # Runs whose owner was lost go on here instead of being closed.
        self.resumption = Resumption(
            engine, resume or ResumeLimits(), self.recorder, self.recovery, self.tasks.resume
        )
        self.tasks.resumable = self.resumption.active
        if self.resumption.active:
            self.recovery.resume = self.resumption.take_over
        # Runs claimed and not yet started, by session id (``_claim``).
        self._claimed: dict[str, Starting] = {}
        self.commands = Commands(self.backend, self._runs, self._claimed)
        self.new_sessions = NewSessions(self.backend, self.traces, self.recorder, self.limits)
        self.retention = Retention(
            self.backend,
            self.recorder,
            self.traces,
            self.limits,
            self._runs,
            record=self._record,
            # Not ``abort``: that refuses a session no longer live.
            abort=lambda sid, reason: self.commands.abort(sid, reason, AbortKind.USER),
        )
        # Runs past the limit check but not yet in _runs (their claim awaits).
        self._starting = 0
        self.streams = StreamSlots(self.backend.logs, self.limits)
        self._closing = False
        # Draining: no new runs or sessions; the running ones go on.
        self._draining = False
        self._started: asyncio.Task[None] | None = None
        self._background: list[asyncio.Task[None]] = []

    @property
    def engine_max_attempts(self) -> int | None:
        engine = self.engine
        return engine.max_attempts if isinstance(engine, RetriesRequests) else None

    @property
    def approval_policy(self) -> ApprovalPolicy:
        return ApprovalPolicy(self.default_approval, self.client_modes)

    @property
    def idempotency_keys(self) -> IdempotencyKeys:
        return self.backend.idempotency

    @property
    def max_record_bytes(self) -> int:
        """The longest record the trace readers accept; longer ones stop the run."""
        return self.recorder.max_record_bytes

    @max_record_bytes.setter
    def max_record_bytes(self, value: int) -> None:
        self.recorder.max_record_bytes = value

    # ---- startup ----------------------------------------------------------------

    async def start(self) -> None:
        """Indexes the sessions on disk and starts the background work (idempotent;
        every public method calls it)."""
        if self._started is None:
            self._started = asyncio.ensure_future(self._start())
        await asyncio.shield(self._started)

    async def _start(self) -> None:
        # A shared backend that cannot be reached now fails the start, whether
        # or not the data dir has sessions to index (BackendUnavailable).
        await self.backend.ping()
        # Before indexing: a session whose delete was interrupted is not
        # indexed again (its delete is finished first).
        await self.retention.finish_marked()
        await self.restore()
        await self.backend.control.listen(self.replica_id, self.commands.received)
        if self.recovery.restarted:
            # In the background: the server is ready while they start again.
            self._background.append(asyncio.create_task(self.resumption.restarted()))
        self._background.append(asyncio.create_task(self.recovery.reclaim_loop()))
        self._background.append(asyncio.create_task(self.loop_load.watch(), name="omni-loop-load"))
        if not math.isinf(self.limits.session_ttl):
            self._background.append(asyncio.create_task(self.retention.expire_loop()))
        if self.backend.sweep_interval is not None:
            self._background.append(asyncio.create_task(self.recovery.sweep_loop()))
            interval = self.backend.sweep_interval
            self._background.append(asyncio.create_task(self.retention.end_deleted_loop(interval)))
            self._background.append(asyncio.create_task(self.recovery.watch_backend()))

    async def restore(self) -> None:
        """Indexes the sessions recorded under the data dir (``Recovery.restore``)."""
        await self.recovery.restore()

    # ---- sessions ---------------------------------------------------------------

    async def create_session(self, approval_mode: ApprovalMode | None = None) -> SessionInfo:
        """A new idle session (the reference's ``POST /api/sessions``), with its
        own approval mode if given (one of the client modes, as for a task)."""
        await self.start()
        if self._closing or self._draining:
            raise HubClosed()
        if approval_mode is not None:
            self._check_mode(approval_mode)
        mode = approval_mode.value if approval_mode is not None else None
        # With its (empty) trace: a restart finds the session again.
        [info] = await self._infos([await self.new_sessions.create(mode, with_trace=True)])
        return info

    async def set_approval_mode(self, session_id: str, mode: ApprovalMode) -> SessionInfo:
        """Changes the session's own approval mode (the reference's PATCH). Every
        replica sees it; a running task applies it from its next tool call."""
        record = await self._record(session_id)
        self._check_mode(mode)
        # On disk first: a restart finds the session in the mode it was given.
        await self.new_sessions.save_mode(record, mode.value)
        if not await self.backend.index.set_approval_mode(session_id, mode.value):
            raise SessionNotFound(session_id)
        return await self.session_info(session_id)

    def _check_mode(self, mode: ApprovalMode) -> None:
        if mode not in self.client_modes:
            raise ModeNotAllowed(mode.value, tuple(m.value for m in self.client_modes))

    async def _record(self, session_id: str) -> SessionRecord:
        # Every entry point that names a session comes through here, so one
        # rule refuses a malformed id everywhere, before any lookup echoes it,
        # and a session is known only while it is live (a run's start asks
        # the index again, in the same step as its claim: ``RunLease.claim``).
        _check_session_id(session_id)
        await self.start()
        record = await self.backend.index.get(session_id)
        if record is None or record.lifecycle is not SessionLifecycle.LIVE:
            raise SessionNotFound(session_id)
        return record

    async def _infos(self, records: Sequence[SessionRecord]) -> list[SessionInfo]:
        return await session_infos(
            records,
            backend=self.backend,
            traces=self.traces,
            recorder=self.recorder,
            default_approval=self.default_approval,
        )

    async def require_session(self, session_id: str) -> None:
        await self._record(session_id)

    async def list_sessions(self) -> list[SessionInfo]:
        await self.start()
        return await self._infos(await self.backend.index.list())

    async def session_info(self, session_id: str) -> SessionInfo:
        [info] = await self._infos([await self._record(session_id)])
        return info

    async def live_tail(self, session_id: str) -> LiveTail | None:
        """While a task runs: what a client loading history mid-run needs to
        paint in-progress fragments (the reference's ``live`` field), else None.

        Folded from the log, so every replica answers alike."""
        await self._record(session_id)
        if not await self.backend.leases.running([session_id]):
            return None
        events = current_run(await self.backend.logs.get(session_id).window())
        if any(bodies.is_task_end(event) for event in events):
            # The lease is taken before the new run publishes its
            # ``task_state running`` (its input is recorded first): until then
            # the window's last run is the one before, which has ended, and its
            # fragments are not live. Nothing of the new run is to paint yet.
            return None
        return fold_live_tail(events)

    async def replay_window(self, session_id: str) -> list[HubEvent]:
        await self._record(session_id)
        return await self.backend.logs.get(session_id).window()

    async def task_record(self, session_id: str, event_id: str) -> TaskRecord | None:
        return await self.backend.tasks.get(session_id, event_id)

    async def task_records(
        self,
        *,
        session_id: str | None = None,
        state: str | None = None,
        updated_after: float | None = None,
        offset: int = 0,
        limit: int = 50,
    ) -> tuple[list[TaskRecord], int]:
        return await self.backend.tasks.page(
            session_id=session_id,
            state=state,
            updated_after=updated_after,
            offset=offset,
            limit=limit,
        )

    async def history(self, session_id: str) -> AsyncIterator[omni_pb2.OmniMessage]:
        """The session's recorded messages, from its trace (torn lines skipped).
        Raises SessionNotFound at once, not on the first iteration."""
        return self.traces.read(await self._record(session_id))

    async def history_shards(self, session_id: str) -> list[tuple[int, list[omni_pb2.OmniMessage]]]:
        """The recorded messages shard by shard, each with its file index (``_001``
        is 1): a message's place in its shard is its reference ``tracePosition``."""
        record = await self._record(session_id)
        out = []
        for number, shard in self.traces.numbered(record):
            out.append((number, await asyncio.to_thread(self.traces.read_shard, shard)))
        return out

    async def history_window(
        self, session_id: str, limit: int, before: Position | None = None
    ) -> Window:
        """The last ``limit`` tasks of the history before ``before`` (the
        newest when None), as ``trace/window.py`` cuts them; it costs the
        window, whatever the trace's length (``trace/index.py``)."""
        return await self.traces.window(await self._record(session_id), limit, before)

    def new_session_model(self) -> tuple[str, str]:
        """``(provider, model_id)`` that a session created now would record."""
        payload = self.recorder.meta_for("session-new", self.traces.workspaces_dir / "session-new")
        return str(payload.get("provider", "")), str(payload.get("model_id", ""))

    async def delete_session(self, session_id: str, *, delete_trace: bool = False) -> bool:
        """Ends a session (``Retention.delete``); True when a task was running.
        Once begun, a delete runs to its end even if its caller goes away."""
        deleting = asyncio.ensure_future(
            self.retention.delete(session_id, delete_trace=delete_trace)
        )
        return await asyncio.shield(deleting)

    async def expire_idle(self) -> list[str]:
        """Deletes the sessions idle past ``--session-ttl`` (``Retention``)."""
        return await self.retention.expire_idle()

    # ---- tasks ------------------------------------------------------------------

    async def run(
        self, request: RunRequest, context: CallContext | None = None
    ) -> tuple[str, Subscription]:
        """Starts a task and returns its session id and a subscription that sees the
        task from its first input message to its closing ``task_state idle``.
        A ``context`` with a deadline: a call already past it is refused
        (``CallEnded``), and a run still going when it passes is aborted
        (``DEADLINE_REASON``), on every transport alike."""
        if context is not None and context.expired:
            raise CallEnded("Run")
        await self.start()
        if self._closing or self._draining:
            raise HubClosed()
        check_input(request.input, self.recorder.max_record_bytes)
        if request.approval_mode is not None:
            self._check_mode(request.approval_mode)
        self.recorder.check_storage()
        if request.session_id:
            _check_session_id(request.session_id)
        if len(self._runs) + self._starting >= self.limits.max_runs:
            raise LimitExceeded("max_runs", self.limits.max_runs)
        self._check_load()
        self._starting += 1  # the slot is ours from here, whatever the awaits below
        try:
            return await self._start_run(request, context)
        finally:
            self._starting -= 1

    async def _start_run(
        self, request: RunRequest, context: CallContext | None
    ) -> tuple[str, Subscription]:
        if request.session_id:
            record = await self._record(request.session_id)
            self.streams.check(request.session_id)
            return await self._claim(record, request, context)
        record = await self.new_sessions.create()
        try:
            return await self._claim(record, request, context, new=True)
        except BaseException:
            # A refused Run leaves nothing behind: its new session would
            # count against --max-sessions with no run ever in it, and its
            # workspace would stay on disk.
            await self.new_sessions.forget(record)
            raise

    async def _claim(
        self,
        record: SessionRecord,
        request: RunRequest,
        context: CallContext | None,
        *,
        new: bool = False,
    ) -> tuple[str, Subscription]:
        session_id = record.session_id
        # The claim: atomic in every backend, so of two concurrent Runs exactly
        # one gets past here, whatever the awaits around it; and in the same
        # step, the session must be live (SessionNotFound once a delete began).
        try:
            lease = await self.backend.leases.claim(session_id, self.replica_id, new=new)
        except BackendUnavailable:
            # The claim may have been taken all the same: not left behind busy.
            await self.recovery.drop_claim(session_id, lambda: self._local_token(session_id))
            raise
        if lease is None:
            raise SessionBusy(session_id)
        # Renewed from the claim on, not from the task's start: under load the
        # subscription below can take longer than the lease lives.
        claim = Claim(lease)
        self.recovery.keeper.keep(claim)
        # An abort from here on (a delete's) waits in the run's signal.
        starting = self._claimed[session_id] = Starting(claim)
        logs = self.backend.logs
        event_log = logs.get(session_id)
        logs.hold(session_id)
        try:
            subscription = await self.streams.open(session_id, event_log.subscribe())
        except BaseException:
            self._claimed.pop(session_id, None)
            self.recovery.keeper.drop(claim)
            logs.release(session_id)
            await self.recovery.drop_lease(claim.lease)
            raise
        lease = claim.lease  # as last renewed
        broker = ApprovalBroker(session_id, self.limits.approval_wait)
        record = replace(record, lifecycle=SessionLifecycle.LIVE)  # the claim made it so
        run = Run(record, lease, event_log, starting.abort, broker)
        # The task owns its input from here, and lets each message go once it
        # is emitted: the request it keeps for its options does not hold them.
        inputs = [stamped(m) for m in request.input]
        self.tasks.start(run, inputs, replace(request, input=[]))
        del self._claimed[session_id]  # a run now: no await since it was started
        if context is not None:
            _abort_at_deadline(run, context)
        return session_id, subscription

    def _check_load(self) -> None:
        """Refuses a new run while the event loop, running many runs, has had
        no idle time (``loop_load``): told at once, before anything is
        created, rather than taken on by a replica too loaded to take its
        gRPC calls in time."""
        limit = self.limits.max_loop_busy
        if not limit or len(self._runs) < OVERLOAD_MIN_RUNS:
            return
        busy = round(self.loop_load.busy * 100)
        if busy >= limit:
            raise Overloaded(busy, limit, len(self._runs))

    def _local_token(self, session_id: str) -> int | None:
        run = self._runs.get(session_id)
        return run.lease.token if run is not None else None

    async def attach(self, session_id: str, after_event_id: str | None) -> Subscription:
        """Replay after ``after_event_id`` (or resync), then the task state and the
        pending approvals to this subscriber only, then the live stream."""
        await self._record(session_id)

        async def initial() -> list[EventBody]:
            running = bool(await self.backend.leases.running([session_id]))
            state = SessionState.RUNNING if running else SessionState.IDLE
            out = [bodies.task_state_body(state)]
            out.extend(await self.backend.approvals.list(session_id))
            return out

        self.streams.check(session_id)
        event_log = self.backend.logs.get(session_id)
        return await self.streams.open(
            session_id, event_log.subscribe(after_event_id or None, initial)
        )

    async def approve(self, session_id: str, tool_call_id: str, decision: str) -> None:
        try:
            chosen = Decision(decision)
        except ValueError:
            raise InvalidRequest("decision", "must be allow, deny or forbidden") from None
        await self._record(session_id)
        await self.commands.approve(session_id, tool_call_id, chosen)

    async def abort(
        self, session_id: str, reason: str | None = None, kind: AbortKind = AbortKind.USER
    ) -> bool:
        """Signals the running task, wherever it runs; False when the session is idle."""
        await self._record(session_id)
        return await self.commands.abort(session_id, reason, kind)

    async def wait_idle(self, session_id: str) -> None:
        run = self._runs.get(session_id)
        if run is not None and run.task is not None:
            await asyncio.shield(run.task)

    # ---- draining and shutdown ------------------------------------------------------

    @property
    def running(self) -> int:
        """Tasks this process runs (or is starting) now."""
        return len(self._runs) + self._starting

    def drain(self) -> None:
        """Takes no new runs or sessions from now on (HubClosed: UNAVAILABLE /
        503), and health says NOT_SERVING so load balancers move away. The
        running tasks go on: their streams, approvals and aborts are served."""
        if not self._draining:
            self._draining = True
            self.health.report(DRAINING, "the server is draining: it takes no new runs")

    async def wait_drained(self) -> None:
        """Returns once no task of this process is running or starting."""
        while self.running:
            tasks = [run.task for run in self._runs.values() if run.task is not None]
            if tasks:
                await asyncio.wait(tasks)
            else:  # claims still on their way: they become tasks, or fail, soon
                await asyncio.sleep(0.05)

    async def shutdown(self, reason: str = AbortKind.SHUTDOWN.default_reason) -> None:
        """Aborts every task this process runs, waits for each to record its abort,
        and ends every subscription."""
        self._closing = True
        tasks = []
        # A drain that ran out hands its runs over (another replica, or this
        # server's next start, resumes them) instead of aborting them.
        hand_over = self._draining and self.resumption.active
        for run in list(self._runs.values()):
            if hand_over:
                self.tasks.hand_over(run)
            else:
                abort_local(run, reason, AbortKind.SHUTDOWN)
            if run.task is not None:
                tasks.append(run.task)
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        await self._close_unrecorded()
        self.recorder.stop()
        await self.recovery.keeper.close()
        pending = [*self._background, *self.recovery.pending_closes, *self.new_sessions.pending]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        self.recorder.close()
        await self.backend.logs.close()
        await self.backend.control.close()
        await self.backend.aclose()
        closer = getattr(self.engine, "aclose", None)
        if closer is not None:
            await closer()

    async def _close_unrecorded(self) -> None:
        """Records, if the storage takes them now, the closes this process
        owes the traces of runs a full or read-only disk stopped (whichever
        transport started them): a clean stop leaves no trace ending in an
        open request. Under the session's run lease, as a run would; one
        that cannot be closed now stays marked for the next run or start."""
        for session_id in list(self.recorder.unclosed):
            try:
                record = await self.backend.index.get(session_id)
                if record is None or record.unclosed is None:
                    continue
                lease = await self.backend.leases.acquire(session_id, self.replica_id)
                if lease is None:
                    continue  # a run is open: it closes the trace first
                try:
                    run = Run(
                        record,
                        lease,
                        self.backend.logs.get(session_id),
                        AbortSignal(),
                        ApprovalBroker(session_id),
                    )
                    await self.recovery.close_unrecorded(run, record.unclosed)
                finally:
                    await self.backend.leases.release(lease)
            except Exception:  # still failing: the mark stays for the next run or start
                log.warning("session %s: its run is still not closed in the trace", session_id)


def _check_session_id(session_id: str) -> None:
    if not is_session_id(session_id):
        raise InvalidRequest("session_id", SESSION_ID_RULE)


def _abort_at_deadline(run: Run, context: CallContext) -> None:
    """Aborts ``run`` when its call's deadline passes, unless it ended first.
    The client's call has ended by then (its transport cut it off), so it is
    the client's leaving, with the reason naming the deadline."""
    remaining = context.remaining()
    if remaining is None or run.task is None:
        return
    timer = asyncio.get_running_loop().call_later(
        remaining, abort_local, run, DEADLINE_REASON, AbortKind.CLIENT_GONE
    )
    run.task.add_done_callback(lambda _task: timer.cancel())
