"""The session hub: a coordinator between engines, the backend and transports.

Transports call the hub and render what its subscriptions yield; they never
number, buffer or record events themselves. A task publishes, in order: the
run's input messages, ``task_state running``, every engine message, and
``task_state idle``. The trace gets ``session_meta`` (first run only), the
input, then every recordable engine message, each before it is published.

What another replica needs (sessions, who runs what, pending approvals, the
events) is in the backend (``runtime.backend``); the hub keeps only the runs
this process executes: their tasks, abort signals and approval futures. A
replica that finds a run whose owner stopped renewing its lease closes it the
way an abort would (``_close_orphan``).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import re
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from omni_grpc import protocol
from omni_grpc.convert import ConversionError, message_from_dict, message_to_dict
from omni_grpc.engines.base import (
    AbortSignal,
    DescribesSession,
    Engine,
    EngineMessage,
    JsonObject,
    ReadOnlyTools,
    RunOptions,
)
from omni_grpc.observability.observer import HubObserver, RunObservation
from omni_grpc.runtime import bodies
from omni_grpc.runtime.approvals import ApprovalBroker, ApprovalMode, default_client_modes
from omni_grpc.runtime.backend import Backend, memory_backend
from omni_grpc.runtime.control_channel import Command
from omni_grpc.runtime.errors import (
    ApprovalNotPending,
    BackendUnavailable,
    Fenced,
    HubClosed,
    InvalidRequest,
    LimitExceeded,
    ModeNotAllowed,
    SessionBusy,
    SessionNotFound,
    StorageUnavailable,
    TooManyStreams,
)
from omni_grpc.runtime.event_log import EventLog, Subscription
from omni_grpc.runtime.events import EventBody, HubEvent
from omni_grpc.runtime.health import (
    BACKEND,
    STORAGE,
    HealthState,
    RunFailure,
    storage_failure,
)
from omni_grpc.runtime.limits import Limits
from omni_grpc.runtime.live_tail import LiveTail, fold_live_tail
from omni_grpc.runtime.memory_log import MemoryEventLog
from omni_grpc.runtime.run_guard import RunGuard
from omni_grpc.runtime.run_lease import Lease
from omni_grpc.runtime.session_index import SessionRecord
from omni_grpc.runtime.trace_store import TraceStore, utc_now
from omni_grpc.trace.lines import DEFAULT_MAX_LINE_BYTES
from omni_grpc.trace.paths import new_session_id, parse_shard_name
from omni_grpc.trace.resume import INTERRUPTED_REASON, recover_shard
from omni_grpc.vocabulary import AbortKind, Decision, SessionState
from omni_grpc_proto.omni.v1 import agent_service_pb2, omni_pb2

log = logging.getLogger(__name__)

SESSION_ID = re.compile(r"^[A-Za-z0-9_-]{1,128}$")
BACKEND_LOST_REASON = "the session store became unavailable"
# Recorded (once the storage works again) to close a run stopped by it.
UNRECORDED_REASON = "the trace could not be written; the server stopped the run"
# Seconds between checks of a failing trace storage (health recovers on its own).
STORAGE_PROBE_SECONDS = 5.0
# Seconds between pings of a shared backend (health follows it).
BACKEND_PING_SECONDS = 1.0

# Builds a session's event log (tests); the default comes from the backend.
LogFactory = Callable[[str], MemoryEventLog]

# Idle logs are looked for this often (memory is freed on a timer, not only
# when the next request happens to come).
_RECLAIM_EVERY = 60.0


class TraceRejected(Exception):
    """The trace did not accept a record: the run must stop, unpublished."""

    def __init__(self, failure: RunFailure) -> None:
        super().__init__(failure.message)
        self.failure = failure


@dataclass
class RunRequest:
    """What a transport asks the hub to run (already decoded from its wire form)."""

    input: list[omni_pb2.OmniMessage]
    session_id: str | None = None
    thinking_level: str | None = None
    approval_mode: ApprovalMode | None = None
    metadata: JsonObject = field(default_factory=dict)


@dataclass
class SessionInfo:
    session_id: str
    state: SessionState
    created_at: str
    updated_at: str
    message_count: int
    last_event_id: str | None
    # From the session_meta the trace opens with (or will, before the first run).
    provider: str = ""
    model_id: str = ""
    workspace: str = ""
    source: str | None = None
    # The mode a task that names none runs under (the server's default).
    approval_mode: str = ApprovalMode.ALLOW_ALL.value
    pending_approvals: int = 0
    # The shard new records go to; None until the first run writes one.
    trace_path: str | None = None

    @property
    def has_trace(self) -> bool:
        return self.trace_path is not None


@dataclass
class _Run:
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
    renewal: asyncio.Task[None] | None = None
    # Set once the lease is lost: nothing more is written, anywhere.
    lost: bool = False
    # The last event queued with publish_nowait (its failure stops the run).
    last_publish: asyncio.Future[HubEvent] | None = None
    # A write of the trace's record count to the index is on its way.
    counting: asyncio.Task[None] | None = None
    count_dirty: bool = False

    @property
    def session_id(self) -> str:
        return self.record.session_id


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
    ) -> None:
        self.engine = engine
        self.limits = limits or Limits()
        self.observer = observer or HubObserver()
        self.traces = TraceStore(data_dir, writer=self.observer.trace_writer)
        self.default_approval = default_approval
        # The approval modes a run may ask for (a policy: wider ones are refused).
        self.client_modes = client_modes or default_client_modes(default_approval)
        self.abort_grace = abort_grace
        self.backend = backend or memory_backend(log_factory=log_factory)
        self.backend.logs.observe(self.observer.event_log)
        # Names this process in run leases and the control channel.
        self.replica_id = replica_id or secrets.token_hex(6)
        self._runs: dict[str, _Run] = {}
        # Runs past the limit check but not yet in _runs (their claim awaits).
        self._starting = 0
        # Per session: subscriptions being opened (not yet in subscriber_count).
        self._subscribing: dict[str, int] = {}
        self._closing = False
        self._started: asyncio.Task[None] | None = None
        self._background: list[asyncio.Task[None]] = []
        # Closing attempts for runs whose end could not be published yet.
        self._pending_closes: set[asyncio.Task[None]] = set()
        self.health = HealthState()
        self._storage_probe: asyncio.Task[None] | None = None
        # Sessions whose trace still holds a run open (its trace could not be
        # written, or a crash's repair could not be at startup): the reason to
        # close it with, before anything else is recorded.
        self._unclosed: dict[str, str] = {}
        # The longest record the trace readers accept; longer ones stop the run.
        self.max_record_bytes = DEFAULT_MAX_LINE_BYTES

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
        await self.restore()
        await self.backend.control.listen(self.replica_id, self._on_command)
        self._background.append(asyncio.create_task(self._reclaim_loop()))
        if self.backend.sweep_interval is not None:
            self._background.append(asyncio.create_task(self._sweep_loop()))
            self._background.append(asyncio.create_task(self._watch_backend()))

    async def restore(self) -> None:
        """Indexes the sessions recorded under the data dir (after a restart, or
        traces another replica wrote); sessions already indexed are kept.

        A session indexed here for the first time gets its newest shard made
        whole (a crash's torn tail set aside, an interrupted run closed). One
        already indexed is left alone: another replica may be running it, and
        a run whose replica died is closed by the orphan sweep instead."""
        for record in await asyncio.to_thread(self.traces.scan):
            if await self.backend.index.add(record):
                count, repaired = await asyncio.to_thread(self.traces.recover, record)
                if not repaired:  # a read-only or full disk: before the next run
                    self._unclosed[record.session_id] = INTERRUPTED_REASON
                if count != record.message_count:
                    await self.backend.index.recorded(record.session_id, count, utc_now())

    # ---- sessions ---------------------------------------------------------------

    async def _new_record(self) -> SessionRecord:
        while True:
            session_id = new_session_id()
            now = utc_now()
            try:
                workspace = self.traces.workspace(session_id)
            except OSError as exc:
                failure = self._storage_failed(exc)
                exhausted = failure.code == "resource_exhausted"
                raise StorageUnavailable(failure.message, exhausted=exhausted) from exc
            meta = self._meta_for(session_id, workspace)
            shard = self.traces.new_shard(session_id)
            record = SessionRecord(session_id, now, now, 0, (shard,), meta)
            if await self.backend.index.add(record, limit=self.limits.max_sessions):
                return record

    async def create_session(self) -> SessionInfo:
        """A new idle session (the reference's ``POST /api/sessions``)."""
        await self.start()
        [info] = await self._infos([await self._new_record()])
        return info

    async def _record(self, session_id: str) -> SessionRecord:
        await self.start()
        record = await self.backend.index.get(session_id)
        if record is None:
            raise SessionNotFound(session_id)
        return record

    async def _infos(self, records: Sequence[SessionRecord]) -> list[SessionInfo]:
        running = await self.backend.leases.running([r.session_id for r in records])
        out = []
        for r in records:
            meta = r.meta
            if meta is None:
                meta = self._meta_for(r.session_id, self.traces.workspaces_dir / r.session_id)
            source = meta.get("source")
            out.append(
                SessionInfo(
                    session_id=r.session_id,
                    state=SessionState.RUNNING if r.session_id in running else SessionState.IDLE,
                    created_at=r.created_at,
                    updated_at=r.updated_at,
                    message_count=r.message_count,
                    last_event_id=await self.backend.logs.last_event_id(r.session_id),
                    provider=str(meta.get("provider", "")),
                    model_id=str(meta.get("model_id", "")),
                    workspace=str(meta.get("workspace", "")),
                    source=source if isinstance(source, str) else None,
                    approval_mode=self.default_approval.value,
                    pending_approvals=len(await self.backend.approvals.list(r.session_id)),
                    trace_path=str(self.traces.paths(r)[-1]) if r.message_count else None,
                )
            )
        return out

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
        return fold_live_tail(_current_run(await self.backend.logs.get(session_id).window()))

    async def history(self, session_id: str) -> AsyncIterator[omni_pb2.OmniMessage]:
        """The session's recorded messages, from its trace (torn lines skipped).
        Raises SessionNotFound at once, not on the first iteration."""
        return self.traces.read(await self._record(session_id))

    async def history_shards(self, session_id: str) -> list[tuple[int, list[omni_pb2.OmniMessage]]]:
        """The recorded messages shard by shard, each with its file index (``_001``
        is 1): a message's place in its shard is its reference ``tracePosition``."""
        record = await self._record(session_id)
        out = []
        for shard in self.traces.paths(record):
            parsed = parse_shard_name(shard)
            if parsed is not None and shard.exists():
                out.append((parsed[1], await asyncio.to_thread(self.traces.read_shard, shard)))
        return out

    def new_session_model(self) -> tuple[str, str]:
        """``(provider, model_id)`` that a session created now would record."""
        payload = self._meta_for("session-new", self.traces.workspaces_dir / "session-new")
        return str(payload.get("provider", "")), str(payload.get("model_id", ""))

    # ---- tasks ------------------------------------------------------------------

    async def run(self, request: RunRequest) -> tuple[str, Subscription]:
        """Starts a task and returns its session id and a subscription that sees the
        task from its first input message to its closing ``task_state idle``."""
        await self.start()
        if self._closing:
            raise HubClosed()
        _check_input(request.input)
        mode = request.approval_mode
        if mode is not None and mode not in self.client_modes:
            raise ModeNotAllowed(mode.value, tuple(m.value for m in self.client_modes))
        self._check_storage()
        if request.session_id and not SESSION_ID.match(request.session_id):
            raise InvalidRequest("session_id", "must match [A-Za-z0-9_-]{1,128}")
        if len(self._runs) + self._starting >= self.limits.max_runs:
            raise LimitExceeded("max_runs", self.limits.max_runs)
        self._starting += 1  # the slot is ours from here, whatever the awaits below
        try:
            return await self._start_run(request)
        finally:
            self._starting -= 1

    async def _start_run(self, request: RunRequest) -> tuple[str, Subscription]:
        if request.session_id:
            record = await self._record(request.session_id)
            self._check_streams(request.session_id)
        else:
            record = await self._new_record()
        session_id = record.session_id
        # The claim: atomic in every backend, so of two concurrent Runs exactly
        # one gets past here, whatever the awaits around it.
        lease = await self.backend.leases.acquire(session_id, self.replica_id)
        if lease is None:
            raise SessionBusy(session_id)
        logs = self.backend.logs
        event_log = logs.get(session_id)
        logs.hold(session_id)
        try:
            subscription = await self._subscribe(session_id, event_log.subscribe())
        except BaseException:
            logs.release(session_id)
            with contextlib.suppress(Exception):
                await self.backend.leases.release(lease)
            raise
        broker = ApprovalBroker(session_id, self.limits.approval_wait)
        run = _Run(record, lease, event_log, AbortSignal(), broker)
        self._runs[session_id] = run
        inputs = [_stamped(m) for m in request.input]
        run.task = asyncio.create_task(
            self._drive(run, inputs, request), name=f"omni-run-{session_id}"
        )
        if self.backend.leases.ttl != float("inf"):
            run.renewal = asyncio.create_task(self._renew(run))
        return session_id, subscription

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

        self._check_streams(session_id)
        event_log = self.backend.logs.get(session_id)
        return await self._subscribe(
            session_id, event_log.subscribe(after_event_id or None, initial)
        )

    def _check_streams(self, session_id: str) -> None:
        """Refuses a stream past the per-session limit (this replica's streams)."""
        limit = self.limits.max_streams_per_session
        opening = self._subscribing.get(session_id, 0)
        if self.backend.logs.get(session_id).subscriber_count + opening >= limit:
            raise TooManyStreams(session_id, limit)

    async def _subscribe(
        self, session_id: str, subscribing: Awaitable[Subscription]
    ) -> Subscription:
        """Awaits a subscribe checked by ``_check_streams``, counting it as open
        meanwhile, so concurrent streams cannot all pass the same check."""
        self._subscribing[session_id] = self._subscribing.get(session_id, 0) + 1
        try:
            return await subscribing
        finally:
            left = self._subscribing.pop(session_id) - 1
            if left:
                self._subscribing[session_id] = left

    async def approve(self, session_id: str, tool_call_id: str, decision: str) -> None:
        try:
            chosen = Decision(decision)
        except ValueError:
            raise InvalidRequest("decision", "must be allow, deny or forbidden") from None
        await self._record(session_id)
        lease_owner = await self.backend.leases.owner(session_id)
        # Taking the ask is what makes this Approve the one that counts.
        if lease_owner is None or not await self.backend.approvals.take(session_id, tool_call_id):
            raise ApprovalNotPending(session_id, tool_call_id)
        await self.backend.control.send(
            lease_owner,
            Command(session_id, "approve", 0, tool_call_id=tool_call_id, decision=chosen),
        )

    async def abort(
        self, session_id: str, reason: str | None = None, kind: AbortKind = AbortKind.USER
    ) -> bool:
        """Signals the running task, wherever it runs; False when the session is idle."""
        await self._record(session_id)
        run = self._runs.get(session_id)
        if run is not None:  # here: no round trip, and no window after the task ends
            self._abort_local(run, reason, kind)
            return True
        lease_owner = await self.backend.leases.owner(session_id)
        if lease_owner is None:
            return bool(await self.backend.leases.running([session_id]))  # orphan: being closed
        command = Command(session_id, "abort", 0, reason=reason, abort_kind=kind)
        await self.backend.control.send(lease_owner, command)
        return True

    def _abort_local(self, run: _Run, reason: str | None, kind: AbortKind) -> None:
        run.abort.set(reason or kind.default_reason, kind)
        run.approvals.deny_all()

    def _on_command(self, command: Command) -> None:
        run = self._runs.get(command.session_id)
        if run is None or (command.token and command.token != run.lease.token):
            return  # the run ended (or moved) before the command arrived
        if command.kind == "abort":
            self._abort_local(run, command.reason, AbortKind(command.abort_kind))
        elif command.kind == "approve":
            run.approvals.resolve(command.tool_call_id, Decision(command.decision))

    async def wait_idle(self, session_id: str) -> None:
        run = self._runs.get(session_id)
        if run is not None and run.task is not None:
            await asyncio.shield(run.task)

    async def shutdown(self, reason: str = AbortKind.SHUTDOWN.default_reason) -> None:
        """Aborts every task this process runs, waits for each to record its abort,
        and ends every subscription."""
        self._closing = True
        tasks = []
        for run in list(self._runs.values()):
            self._abort_local(run, reason, AbortKind.SHUTDOWN)
            if run.task is not None:
                tasks.append(run.task)
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        if self._storage_probe is not None:
            self._storage_probe.cancel()
        for task in [*self._background, *self._pending_closes]:
            task.cancel()
        await asyncio.gather(*self._background, *self._pending_closes, return_exceptions=True)
        await self.backend.logs.close()
        await self.backend.control.close()
        await self.backend.aclose()
        closer = getattr(self.engine, "aclose", None)
        if closer is not None:
            await closer()

    # ---- the task itself ---------------------------------------------------------

    def _check_lease(self, run: _Run) -> None:
        """Before a trace write: the lease must certainly still be ours."""
        if run.lost or not run.lease.still_valid():
            run.lost = True
            raise Fenced(run.session_id, run.lease.token)

    def _append_trace(
        self, run: _Run, msg: omni_pb2.OmniMessage, data: bytes | None = None
    ) -> bool:
        """Appends one record to the trace; False when it is not recordable.
        Raises TraceRejected when the disk refuses it, Fenced once the lease
        may have been lost."""
        self._check_lease(run)
        line = data or bodies.message_body(msg).data
        if len(line) > self.max_record_bytes:
            # The trace readers (GetHistory, /messages) skip a line past their
            # limit: such a message would be published and then silently lost.
            raise TraceRejected(
                RunFailure(
                    "resource_exhausted",
                    f"a {_arm(msg)} message of {len(line)} bytes is over the trace's "
                    f"record limit ({self.max_record_bytes} bytes); the run was stopped",
                )
            )
        try:
            written = self.traces.append(run.record, msg, line)
        except OSError as exc:
            raise TraceRejected(self._storage_failed(exc)) from exc
        if written:
            self.health.clear(STORAGE)
            run.record = replace(
                run.record, message_count=run.record.message_count + 1, updated_at=utc_now()
            )
        return written

    async def _record_message(
        self, run: _Run, msg: omni_pb2.OmniMessage, data: bytes | None = None
    ) -> None:
        """Appends one record to the trace, then counts it in the index."""
        if self._append_trace(run, msg, data):
            await self._count(run)

    async def _count(self, run: _Run) -> None:
        record = run.record
        await self.backend.index.recorded(run.session_id, record.message_count, record.updated_at)

    def _count_soon(self, run: _Run) -> None:
        """Counts in the background, the newest count only: the index holds an
        absolute count, so a write skipped or lost is made good by the next."""
        run.count_dirty = True
        if run.counting is None:
            run.counting = asyncio.create_task(self._counter(run))

    async def _counter(self, run: _Run) -> None:
        try:
            while run.count_dirty:
                run.count_dirty = False
                try:
                    await self._count(run)
                except BackendUnavailable:
                    return  # the run's end counts again
        finally:
            run.counting = None

    async def _settle(self, run: _Run) -> None:
        """Waits for what was queued for the log; raises its failure."""
        if run.last_publish is not None:
            await run.last_publish

    async def _emit(
        self,
        run: _Run,
        msg: omni_pb2.OmniMessage,
        as_dict: Mapping[str, Any] | None = None,
    ) -> None:
        if run.lost:
            raise Fenced(run.session_id, run.lease.token)
        # Partials and child-session messages are never recorded; skipping them
        # here keeps the writer's full check off the hot path of every delta.
        arm = msg.WhichOneof("payload") or ""
        kind = _abort_kind(run.abort) if arm == "abort" else None
        body = bodies.message_body(msg, kind)  # serialized once, for the trace and every transport
        last = run.last_publish
        if last is not None and last.done() and last.exception() is not None:
            raise last.exception()  # type: ignore[misc]
        written = False
        if not arm.startswith("partial_") and not msg.origin:
            written = self._append_trace(run, msg, body.data)
        # Observed once recorded, before anything else can fail: the closing
        # messages of a run cut short must not repeat what the trace holds.
        run.guard.observe(as_dict if as_dict is not None else message_to_dict(msg))
        if written:
            self._count_soon(run)
        # Queued, not awaited: the engine goes on while the backend writes what
        # queued meanwhile in one round trip. When the backend is behind, or a
        # reader that keeps up is about to fall out of the window, it waits.
        run.last_publish = run.log.publish_nowait(body, fence=run.lease.token)
        if run.log.congested:
            await run.last_publish
        run.observed.message(msg, arm, kind)

    async def _renew(self, run: _Run) -> None:
        """Keeps the lease while the task runs; a lost lease stops the task."""
        interval = self.backend.leases.ttl / 4
        while True:
            await asyncio.sleep(interval)
            try:
                renewed = await self.backend.leases.renew(run.lease)
            except BackendUnavailable:
                if run.lease.still_valid():
                    continue  # it may come back before the lease runs out
                renewed = None
            if renewed is None:
                log.warning("session %s: lost the run lease; stopping the task", run.session_id)
                run.lost = True
                self._abort_local(run, None, AbortKind.REPLICA_LOST)
                return
            run.lease = renewed

    async def _drive(
        self, run: _Run, inputs: list[omni_pb2.OmniMessage], request: RunRequest
    ) -> None:
        failed: str | None = None
        failure: RunFailure | None = None
        run.observed = self.observer.run_started(run.session_id, run.abort, inputs)
        crashed = False
        try:
            if run.session_id in self._unclosed:
                await self._close_unrecorded(run, self._unclosed[run.session_id])
            if run.record.message_count == 0:
                meta = message_from_dict(self._session_meta(run.record))
                await self._record_message(run, meta)
            for msg in inputs:
                await self._emit(run, msg)
            await run.log.publish(
                bodies.task_state_body(SessionState.RUNNING), fence=run.lease.token
            )
            await self._run_engine(run, inputs, request)
            await self._settle(run)  # a write that failed after the engine ended
        except Fenced:
            run.lost = True
            log.warning("session %s: fenced by another replica; the task stops", run.session_id)
        except TraceRejected as exc:
            # Nothing more can be recorded, so nothing more is published: the
            # run's client is told through the closing task_state.
            failure = exc.failure
            self._unclosed[run.session_id] = UNRECORDED_REASON
            log.error("session %s: %s", run.session_id, failure.message)
        except OSError as exc:  # the trace directory could not be made or repaired
            failure = self._storage_failed(exc)
            log.error("session %s: %s", run.session_id, failure.message)
        except BackendUnavailable as exc:
            failed = str(exc)
            log.error("session %s: run failed: %s", run.session_id, exc)
        except Exception:  # a hub bug must still end the task cleanly
            log.exception("task of session %s failed", run.session_id)
            crashed = True
        finally:
            if run.renewal is not None:
                run.renewal.cancel()
            run.approvals.deny_all()
            self._runs.pop(run.session_id, None)
            run.observed.finished(failed=failure is not None or failed is not None or crashed)
            if not run.lost:
                await self._finish(run, failed, failure)
            self.backend.logs.release(run.session_id)

    async def _finish(self, run: _Run, failed: str | None, failure: RunFailure | None) -> None:
        """Ends the run in the log: closing messages if the backend failed, then idle."""
        closing: list[EventBody] = []
        if failed is not None:
            closing = await self._close_in_trace(run, BACKEND_LOST_REASON, failed)
            # What failed to reach the log is in the trace; the close says so.
            run.log.forgive(run.lease.token)
        try:
            await self._count(run)
            await self._publish_end(run.session_id, run.log, run.lease, closing, failure)
        except Fenced:
            pass
        except BackendUnavailable:
            # Told no one yet: keep trying until the backend is back (or another
            # replica, finding the lease expired, closes the run itself).
            task = asyncio.create_task(self._finish_later(run, closing))
            self._pending_closes.add(task)
            task.add_done_callback(self._pending_closes.discard)

    async def _close_in_trace(self, run: _Run, reason: str, error: str) -> list[EventBody]:
        """Records the run's close in the trace (best effort) and returns it."""
        out = []
        for item in run.guard.closing_messages(aborted=False, reason=reason, error=error):
            msg = message_from_dict(item)
            with contextlib.suppress(Fenced, TraceRejected, BackendUnavailable):
                await self._record_message(run, msg)
            kind = AbortKind.SERVER_FAILURE if msg.WhichOneof("payload") == "abort" else None
            out.append(bodies.message_body(msg, kind))
        return out

    async def _finish_later(self, run: _Run, closing: list[EventBody]) -> None:
        delay = 0.5
        while run.lease.still_valid():
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)
            try:
                await self._count(run)  # counts lost while the backend was down
                await self._publish_end(run.session_id, run.log, run.lease, closing)
                return
            except Fenced:
                return
            except BackendUnavailable:
                continue

    async def _publish_end(
        self,
        session_id: str,
        event_log: EventLog,
        lease: Lease,
        closing: list[EventBody],
        failure: RunFailure | None = None,
    ) -> None:
        if closing:
            await event_log.publish_many(closing, fence=lease.token)
        await self.backend.approvals.clear(session_id)
        idle = bodies.task_state_body(SessionState.IDLE, failure=failure)
        await event_log.publish(idle, fence=lease.token, end_run=True)

    def _session_meta(self, record: SessionRecord) -> JsonObject:
        payload = record.meta
        if payload is None:
            payload = self._meta_for(record.session_id, self.traces.workspace(record.session_id))
        return protocol.session_meta(payload, timestamp=record.created_at)

    def _meta_for(self, session_id: str, workspace: Path) -> JsonObject:
        if isinstance(self.engine, DescribesSession):
            return self.engine.session_meta(session_id, workspace)
        return protocol.session_meta_payload(
            session_id,
            "omni-grpc",
            getattr(self.engine, "name", type(self.engine).__name__),
            "unknown",
            "",
            "",
            str(workspace),
        )

    async def _run_engine(
        self, run: _Run, inputs: list[omni_pb2.OmniMessage], request: RunRequest
    ) -> None:
        guard, abort = run.guard, run.abort
        mode = request.approval_mode or self.default_approval
        session_id = run.session_id

        async def publish_ask(tool_call_id: str, tool_call: JsonObject) -> None:
            body = bodies.approval_request_body(message_from_dict(tool_call))
            # Pending first: a client that sees the request can approve it at once.
            await self.backend.approvals.add(session_id, tool_call_id, body)
            run.observed.asked(tool_call)  # counted before any client can see the ask
            await run.log.publish(body, fence=run.lease.token)

        async def forget_ask(tool_call_id: str) -> None:
            with contextlib.suppress(BackendUnavailable):
                await self.backend.approvals.take(session_id, tool_call_id)

        read_only: Callable[[str], bool] = (
            self.engine.is_read_only_tool
            if isinstance(self.engine, ReadOnlyTools)
            else (lambda _n: False)
        )
        options = RunOptions(
            session_id=session_id,
            approve=run.observed.approver(
                run.approvals.make_approver(mode, abort, publish_ask, forget_ask, read_only)
            ),
            abort=abort,
            thinking_level=request.thinking_level,
            workspace=self.traces.workspace(session_id),
            trace=self.traces.view(run.record),
            metadata=request.metadata,
        )
        failure: list[str] = []
        infrastructure: list[BaseException] = []

        async def pump() -> None:
            stream = self.engine.run([message_to_dict(m) for m in inputs], options)
            try:
                async for item in stream:
                    msg, as_dict = _decode(item)
                    await self._emit(run, msg, as_dict)
            except TraceRejected as exc:
                infrastructure.append(exc)
                abort.set(exc.failure.message, AbortKind.SERVER_FAILURE)
            except (Fenced, BackendUnavailable) as exc:
                infrastructure.append(exc)
            except ConversionError as exc:
                failure.append(f"engine produced an invalid message: {exc}")
            except Exception as exc:
                log.exception("engine failed in session %s", session_id)
                failure.append(f"engine error: {exc}")
            finally:
                with contextlib.suppress(Exception):
                    await stream.aclose()  # type: ignore[attr-defined]

        pumping = asyncio.create_task(pump())
        aborted = asyncio.create_task(abort.wait())
        try:
            await asyncio.wait({pumping, aborted}, return_when=asyncio.FIRST_COMPLETED)
            if not pumping.done():
                # Aborted: the engine has abort_grace seconds to yield its abort.
                done, _ = await asyncio.wait({pumping}, timeout=self.abort_grace)
                if not done:
                    failure.append("engine ignored the abort")
                    pumping.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await pumping
        finally:
            aborted.cancel()
            if not pumping.done():
                pumping.cancel()
        if infrastructure:
            raise infrastructure[0]
        if not failure and guard.unfinished and not guard.abort_seen:
            failure.append("engine ended with its stream unfinished")
        if failure or (abort.is_set() and not guard.abort_seen):
            reason = (
                abort.reason if abort.is_set() and abort.reason else (failure or ["aborted"])[0]
            )
            closing = guard.closing_messages(
                aborted=abort.is_set(), reason=reason, error=failure[0] if failure else None
            )
            for item in closing:
                await self._emit(run, message_from_dict(item))

    # ---- the trace storage -----------------------------------------------------

    async def _close_unrecorded(self, run: _Run, reason: str) -> None:
        """Closes, in the trace, the run a failing storage (or a crash whose
        repair the disk refused) left open."""
        self._check_lease(run)
        path = self.traces.paths(run.record)[-1]
        self.traces.forget(run.record)
        if not path.exists():
            self._unclosed.pop(run.session_id, None)
            return
        recovery = await asyncio.to_thread(recover_shard, path, reason)
        if recovery.closed:
            run.record = replace(
                run.record,
                message_count=run.record.message_count + len(recovery.closed),
                updated_at=utc_now(),
            )
            await self._count(run)
        self._unclosed.pop(run.session_id, None)

    def _storage_failed(self, exc: OSError) -> RunFailure:
        log.error("trace storage failed: %s", exc)
        failure = storage_failure(exc)
        self.health.report(STORAGE, failure.message)
        with contextlib.suppress(RuntimeError):  # RuntimeError: no running loop
            if self._storage_probe is None or self._storage_probe.done():
                self._storage_probe = asyncio.get_running_loop().create_task(
                    self._probe_until_healthy(), name="omni-storage-probe"
                )
        return failure

    def _check_storage(self) -> None:
        """Refuses a run up front while the storage is known to fail (and still
        fails a fresh check), instead of starting one that cannot be recorded."""
        problem = self.health.problem(STORAGE)
        if problem is None:
            return
        error = self._probe_storage()
        if error is None:
            self.health.clear(STORAGE)
            return
        full = storage_failure(error).code == "resource_exhausted"
        raise StorageUnavailable(problem, exhausted=full)

    def _probe_storage(self) -> OSError | None:
        traces_dir = self.traces.traces_dir
        probe = traces_dir / f".probe-{os.getpid()}"
        try:
            traces_dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                if os.write(fd, b"\0" * 4096) != 4096:
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            finally:
                os.close(fd)
                with contextlib.suppress(OSError):
                    os.unlink(probe)
        except OSError as exc:
            return exc
        return None

    async def _probe_until_healthy(self) -> None:
        while self.health.problem(STORAGE) is not None and not self._closing:
            await asyncio.sleep(STORAGE_PROBE_SECONDS)
            if await asyncio.to_thread(self._probe_storage) is None:
                self.health.clear(STORAGE)

    # ---- background work -----------------------------------------------------------

    async def _reclaim_loop(self) -> None:
        while True:
            await asyncio.sleep(_RECLAIM_EVERY)
            self.backend.logs.reclaim_idle()

    async def _watch_backend(self) -> None:
        """Health follows the shared backend: NOT_SERVING while it is down."""
        while True:
            try:
                await self.backend.ping()
            except BackendUnavailable as exc:
                if self.health.problem(BACKEND) is None:
                    log.error("the session store is unreachable: %s", exc.detail)
                self.health.report(BACKEND, str(exc))
            else:
                if self.health.problem(BACKEND) is not None:
                    log.warning("the session store is reachable again")
                self.health.clear(BACKEND)
            await asyncio.sleep(BACKEND_PING_SECONDS)

    async def _sweep_loop(self) -> None:
        assert self.backend.sweep_interval is not None
        while True:
            await asyncio.sleep(self.backend.sweep_interval)
            try:
                for session_id in await self.backend.leases.orphans():
                    await self._close_orphan(session_id)
            except BackendUnavailable:
                continue
            except Exception:
                log.exception("looking for orphaned runs failed")

    async def _close_orphan(self, session_id: str) -> None:
        """Closes a run whose owner died: as an abort would, from the log."""
        lease = await self.backend.leases.take_over(session_id, self.replica_id)
        if lease is None:
            return  # another replica got there first
        log.warning("session %s: its owner was lost; closing the run", session_id)
        record = await self.backend.index.get(session_id)
        event_log = self.backend.logs.get(session_id)
        guard = RunGuard()
        for event in _current_run(await event_log.window()):
            message = event.message  # decoded on each access for a kept event
            if message is not None:
                guard.observe(message_to_dict(message))
        lost = AbortKind.REPLICA_LOST
        closing = [
            message_from_dict(item)
            for item in guard.closing_messages(aborted=True, reason=lost.default_reason, error=None)
        ]
        if record is not None:
            self.traces.forget(record)  # the dead owner extended the file
            recorded = await asyncio.to_thread(self.traces.view(record).messages)
            # What the dead owner wrote may not all have been counted.
            record = replace(record, message_count=len(recorded))
            run = _Run(record, lease, event_log, AbortSignal(), ApprovalBroker(session_id))
            # An owner that lost only the backend recorded the close itself.
            closed = bool(recorded) and recorded[-1].get("payload", {}).get("type") == "abort"
            if not closed:
                for msg in closing:
                    with contextlib.suppress(TraceRejected):
                        self._append_trace(run, msg)
            await self._count(run)
        await self._publish_end(
            session_id,
            event_log,
            lease,
            [
                bodies.message_body(m, lost if m.WhichOneof("payload") == "abort" else None)
                for m in closing
            ],
        )


# Payloads a run's input may carry: complete user-side model messages.
_INPUT_PAYLOADS = frozenset({"text", "image_url", "inline_data", "tool_call_output"})


def _abort_kind(signal: AbortSignal | None) -> AbortKind:
    """Who ended the run: whoever set the signal; an engine that aborts with no
    signal set gave up on its own (the reference's ``llm request error``)."""
    if signal is not None and signal.is_set() and signal.kind is not None:
        return signal.kind
    return AbortKind.ENGINE_FAILURE


def _arm(msg: omni_pb2.OmniMessage) -> str:
    return msg.WhichOneof("payload") or "unknown"


def _current_run(events: list[HubEvent]) -> list[HubEvent]:
    """The window's events from the open run's ``task_state running`` on."""
    for index in range(len(events) - 1, -1, -1):
        ev = events[index].server_event
        if (
            ev is not None
            and ev.WhichOneof("kind") == "task_state"
            and ev.task_state.state == agent_service_pb2.SESSION_STATE_RUNNING
        ):
            return events[index:]
    return events


def _check_input(messages: list[omni_pb2.OmniMessage]) -> None:
    if not messages:
        raise InvalidRequest("input", "a run needs at least one input message or a prompt")
    for index, msg in enumerate(messages):
        arm = msg.WhichOneof("payload")
        if arm is None:
            raise InvalidRequest(f"input[{index}].payload", "no payload is set")
        if arm not in _INPUT_PAYLOADS:
            allowed = ", ".join(sorted(_INPUT_PAYLOADS))
            raise InvalidRequest(f"input[{index}].payload", f"{arm} is not run input ({allowed})")
        if msg.origin:
            raise InvalidRequest(f"input[{index}].origin", "run input cannot carry an origin")


def _decode(item: EngineMessage) -> tuple[omni_pb2.OmniMessage, Mapping[str, Any]]:
    if isinstance(item, omni_pb2.OmniMessage):
        return item, message_to_dict(item)
    return message_from_dict(item), item


def _stamped(msg: omni_pb2.OmniMessage) -> omni_pb2.OmniMessage:
    """Input without a timestamp gets the time it arrived."""
    if msg.timestamp:
        return msg
    stamped = omni_pb2.OmniMessage()
    stamped.CopyFrom(msg)
    stamped.timestamp = protocol.now_timestamp()
    return stamped
