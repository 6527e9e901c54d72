"""The session hub: one owner for each session's events, trace and task.

Transports call the hub and render what its subscriptions yield; they never
number, buffer or record events themselves. A task publishes, in order: the
run's input messages, ``task_state running``, every engine message, and
``task_state idle``. The trace gets ``session_meta`` (first run only), the
input, then every recordable engine message, each before it is published.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import re
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
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
from omni_grpc.runtime.errors import (
    HubClosed,
    InvalidRequest,
    ModeNotAllowed,
    SessionBusy,
    SessionNotFound,
    StorageUnavailable,
)
from omni_grpc.runtime.event_log import EventLog, Subscription
from omni_grpc.runtime.events import EventBody
from omni_grpc.runtime.health import STORAGE, HealthState, RunFailure, storage_failure
from omni_grpc.runtime.live_tail import LiveTail
from omni_grpc.runtime.memory_log import DEFAULT_MAX_BYTES, DEFAULT_MAX_COUNT, MemoryEventLog
from omni_grpc.runtime.run_guard import RunGuard
from omni_grpc.runtime.store import SessionStore, utc_now
from omni_grpc.trace import TraceWriter, read_jsonl
from omni_grpc.trace.lines import DEFAULT_MAX_LINE_BYTES
from omni_grpc.trace.paths import new_session_id, parse_shard_name
from omni_grpc.trace.resume import INTERRUPTED_REASON, read_trace, recover_shard
from omni_grpc.vocabulary import AbortKind, Decision, SessionState
from omni_grpc_proto.omni.v1 import omni_pb2

log = logging.getLogger(__name__)

SESSION_ID = re.compile(r"^[A-Za-z0-9_-]{1,128}$")

# Builds a session's event log; the default is the in-memory ring buffer.
LogFactory = Callable[[str], EventLog]
# Seconds between checks of a failing trace storage (health recovers on its own).
STORAGE_PROBE_SECONDS = 5.0
# Recorded (once the storage works again) to close a run stopped by it.
UNRECORDED_REASON = "the trace could not be written; the server stopped the run"


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
class _Session:
    session_id: str
    shards: list[Path]
    workspace: Path
    created_at: str
    updated_at: str
    message_count: int
    meta_written: bool
    approvals: ApprovalBroker
    # The session_meta payload, once known (recorded, or built for the first run).
    meta: JsonObject | None = None
    log: EventLog | None = None
    task: asyncio.Task[None] | None = None
    abort: AbortSignal | None = None
    writer: TraceWriter | None = None
    # While a task runs: its open fragments, and the id of the last message
    # published, which the guard has seen (the live tail of GET /messages).
    live: RunGuard | None = None
    live_cursor: str | None = None
    # What the observer hears of the running task.
    observed: RunObservation | None = None
    # time.monotonic() when the session last stopped running (or was created).
    idle_since: float = field(default_factory=time.monotonic)
    # The trace still holds a run open (its trace could not be written, or a
    # crash's repair could not be at startup): the reason to close it with,
    # before anything else is recorded.
    unclosed: str | None = None

    @property
    def running(self) -> bool:
        return self.task is not None

    @property
    def trace_path(self) -> Path:
        return self.shards[-1]


class Hub:
    def __init__(
        self,
        engine: Engine,
        data_dir: Path,
        *,
        default_approval: ApprovalMode = ApprovalMode.ALLOW_ALL,
        client_modes: tuple[ApprovalMode, ...] | None = None,
        log_factory: LogFactory | None = None,
        abort_grace: float = 10.0,
        buffer_events: int = DEFAULT_MAX_COUNT,
        buffer_bytes: int = DEFAULT_MAX_BYTES,
        log_idle_ttl: float = 30 * 60,
        observer: HubObserver | None = None,
    ) -> None:
        self.engine = engine
        self.observer = observer or HubObserver()
        self.store = SessionStore(data_dir)
        self.default_approval = default_approval
        # The approval modes a run may ask for (a policy: wider ones are refused).
        self.client_modes = client_modes or default_client_modes(default_approval)
        self.abort_grace = abort_grace
        self._log_factory = log_factory or (
            lambda _sid: MemoryEventLog(
                bodies.resync_required_body(), max_count=buffer_events, max_bytes=buffer_bytes
            )
        )
        self._sessions: dict[str, _Session] = {}
        self._closing = False
        self.health = HealthState()
        self._storage_probe: asyncio.Task[None] | None = None
        # Like the reference channel: a log idle, unwatched and not running for
        # this long is dropped (its replacement's new epoch forces a resync).
        self.log_idle_ttl = log_idle_ttl
        # The longest record the trace readers accept; longer ones stop the run.
        self.max_record_bytes = DEFAULT_MAX_LINE_BYTES
        self.restore()

    # ---- sessions ---------------------------------------------------------------

    def restore(self) -> None:
        """Loads the sessions recorded under the data dir (after a restart)."""
        for stored in self.store.scan():
            if stored.session_id in self._sessions:
                continue
            self._sessions[stored.session_id] = _Session(
                session_id=stored.session_id,
                shards=stored.shards,
                workspace=self.store.workspaces_dir / stored.session_id,
                created_at=stored.created_at,
                updated_at=stored.updated_at,
                message_count=stored.record_count,
                meta_written=stored.record_count > 0,
                approvals=ApprovalBroker(stored.session_id),
                meta=stored.meta,
                unclosed=INTERRUPTED_REASON if stored.needs_repair else None,
            )

    def _create_session(self) -> _Session:
        session_id = new_session_id()
        while session_id in self._sessions:
            session_id = new_session_id()
        now = utc_now()
        try:
            workspace = self.store.workspace(session_id)
        except OSError as exc:
            failure = self._storage_failed(exc)
            exhausted = failure.code == "resource_exhausted"
            raise StorageUnavailable(failure.message, exhausted=exhausted) from exc
        session = _Session(
            session_id=session_id,
            shards=[self.store.new_trace_path(session_id)],
            workspace=workspace,
            created_at=now,
            updated_at=now,
            message_count=0,
            meta_written=False,
            approvals=ApprovalBroker(session_id),
        )
        self._sessions[session_id] = session
        return session

    def create_session(self) -> SessionInfo:
        """A new idle session (the reference's ``POST /api/sessions``)."""
        return self._info(self._create_session())

    def _get(self, session_id: str) -> _Session:
        session = self._sessions.get(session_id)
        if session is None:
            raise SessionNotFound(session_id)
        return session

    def _log(self, session: _Session) -> EventLog:
        self._reclaim_idle_logs()
        if session.log is None:
            session.log = self.observer.event_log(self._log_factory(session.session_id))
        return session.log

    def _reclaim_idle_logs(self) -> None:
        """Bounds memory across sessions; runs whenever a log is looked up."""
        cutoff = time.monotonic() - self.log_idle_ttl
        for session in self._sessions.values():
            log = session.log
            if (
                log is not None
                and not session.running
                and session.idle_since < cutoff
                and log.subscriber_count == 0
            ):
                session.log = None

    def _info(self, session: _Session) -> SessionInfo:
        meta = self._meta_payload(session)
        source = meta.get("source")
        return SessionInfo(
            session_id=session.session_id,
            state=SessionState.RUNNING if session.running else SessionState.IDLE,
            created_at=session.created_at,
            updated_at=session.updated_at,
            message_count=session.message_count,
            last_event_id=session.log.last_event_id if session.log else None,
            provider=str(meta.get("provider", "")),
            model_id=str(meta.get("model_id", "")),
            workspace=str(meta.get("workspace", "")),
            source=source if isinstance(source, str) else None,
            approval_mode=self.default_approval.value,
            pending_approvals=len(session.approvals.pending()),
            trace_path=str(session.trace_path) if session.meta_written else None,
        )

    def _meta_payload(self, session: _Session) -> JsonObject:
        if session.meta is None:
            # Not recorded yet: what the first run will record.
            payload = self._session_meta(session)["payload"]
            session.meta = payload if isinstance(payload, dict) else {}
        return session.meta

    def list_sessions(self) -> list[SessionInfo]:
        return [self._info(s) for s in self._sessions.values()]

    def session_info(self, session_id: str) -> SessionInfo:
        return self._info(self._get(session_id))

    def live_tail(self, session_id: str) -> LiveTail | None:
        """While a task runs: what a client loading history mid-run needs to
        paint in-progress fragments (the reference's ``live`` field), else None."""
        session = self._get(session_id)
        if session.live is None or session.live_cursor is None:
            return None
        fragments = [message_from_dict(f) for f in session.live.fragments()]
        return LiveTail(session.live_cursor, fragments)

    def history(self, session_id: str) -> AsyncIterator[omni_pb2.OmniMessage]:
        """The session's recorded messages, from its trace (torn lines skipped).
        Raises SessionNotFound at once, not on the first iteration."""
        return _read_history(list(self._get(session_id).shards))

    async def history_shards(self, session_id: str) -> list[tuple[int, list[omni_pb2.OmniMessage]]]:
        """The recorded messages shard by shard, each with its file index (``_001``
        is 1): a message's place in its shard is its reference ``tracePosition``."""
        shards = list(self._get(session_id).shards)
        out = []
        for shard in shards:
            parsed = parse_shard_name(shard)
            if parsed is not None and shard.exists():
                out.append((parsed[1], await asyncio.to_thread(_read_shard, shard)))
        return out

    # ---- tasks ------------------------------------------------------------------

    async def run(self, request: RunRequest) -> tuple[str, Subscription]:
        """Starts a task and returns its session id and a subscription that sees the
        task from its first input message to its closing ``task_state idle``."""
        if self._closing:
            raise HubClosed()
        _check_input(request.input)
        mode = request.approval_mode
        if mode is not None and mode not in self.client_modes:
            raise ModeNotAllowed(mode.value, tuple(m.value for m in self.client_modes))
        self._check_storage()
        if request.session_id:
            if not SESSION_ID.match(request.session_id):
                raise InvalidRequest("session_id", "must match [A-Za-z0-9_-]{1,128}")
            session = self._get(request.session_id)
            if session.running:
                raise SessionBusy(session.session_id)
        else:
            session = self._create_session()
        event_log = self._log(session)
        subscription = await event_log.subscribe()
        abort = AbortSignal()
        session.abort = abort
        inputs = [_stamped(m) for m in request.input]
        # Claim the session before the first await so a concurrent Run sees it busy.
        session.task = asyncio.create_task(
            self._drive(session, event_log, inputs, request, abort),
            name=f"omni-run-{session.session_id}",
        )
        return session.session_id, subscription

    async def attach(self, session_id: str, after_event_id: str | None) -> Subscription:
        """Replay after ``after_event_id`` (or resync), then the task state and the
        pending approvals to this subscriber only, then the live stream."""
        session = self._get(session_id)
        initial: list[EventBody] = [
            bodies.task_state_body(SessionState.RUNNING if session.running else SessionState.IDLE)
        ]
        for pending in session.approvals.pending():
            if pending.request is not None:
                initial.append(pending.request)
        return await self._log(session).subscribe(after_event_id or None, initial)

    def approve(self, session_id: str, tool_call_id: str, decision: str) -> None:
        try:
            chosen = Decision(decision)
        except ValueError:
            raise InvalidRequest("decision", "must be allow, deny or forbidden") from None
        self._get(session_id).approvals.resolve(tool_call_id, chosen)

    def abort(
        self, session_id: str, reason: str | None = None, kind: AbortKind = AbortKind.USER
    ) -> bool:
        """Signals the running task; False when the session is idle."""
        session = self._get(session_id)
        if not session.running or session.abort is None:
            return False
        session.abort.set(reason or kind.default_reason, kind)
        session.approvals.deny_all()
        return True

    async def wait_idle(self, session_id: str) -> None:
        task = self._get(session_id).task
        if task is not None:
            await asyncio.shield(task)

    async def shutdown(self, reason: str = AbortKind.SHUTDOWN.default_reason) -> None:
        """Aborts every running task, waits for each to record its abort, and ends
        every subscription."""
        self._closing = True
        tasks = []
        for session in self._sessions.values():
            if session.task is not None:
                self.abort(session.session_id, reason, AbortKind.SHUTDOWN)
                tasks.append(session.task)
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        if self._storage_probe is not None:
            self._storage_probe.cancel()
        for session in self._sessions.values():
            if session.log is not None:
                await session.log.close()
        closer = getattr(self.engine, "aclose", None)
        if closer is not None:
            await closer()

    # ---- the task itself ---------------------------------------------------------

    def _writer(self, session: _Session) -> TraceWriter:
        """The session's trace writer, opened on first use."""
        if session.writer is None:
            session.writer = self.observer.trace_writer(session.trace_path)
        return session.writer

    async def _emit(
        self,
        session: _Session,
        event_log: EventLog,
        msg: omni_pb2.OmniMessage,
        as_dict: Mapping[str, Any] | None = None,
    ) -> None:
        # Partials and child-session messages are never recorded; skipping them
        # here keeps the writer's full check off the hot path of every delta.
        arm = msg.WhichOneof("payload") or ""
        kind = _abort_kind(session.abort) if arm == "abort" else None
        body = bodies.message_body(msg, kind)  # serialized once, for the trace and every transport
        recordable = not arm.startswith("partial_") and not msg.origin
        if recordable:
            self._record(session, msg, body.data)
        event = await event_log.publish(body)
        if session.observed is not None:
            session.observed.message(msg, arm, kind)
        # The guard and the cursor move together, with no await between, so a
        # live-tail snapshot never holds a chunk its cursor does not cover.
        if session.live is not None:
            session.live.observe(as_dict if as_dict is not None else message_to_dict(msg))
            session.live_cursor = event.event_id

    async def _drive(
        self,
        session: _Session,
        event_log: EventLog,
        inputs: list[omni_pb2.OmniMessage],
        request: RunRequest,
        abort: AbortSignal,
    ) -> None:
        failure: RunFailure | None = None
        session.observed = observed = self.observer.run_started(session.session_id, abort, inputs)
        crashed = False
        try:
            if session.unclosed is not None and session.trace_path.exists():
                recovery = await asyncio.to_thread(
                    recover_shard, session.trace_path, session.unclosed
                )
                session.message_count = recovery.record_count + sum(
                    len(read_trace(p)[0]) for p in session.shards[:-1]
                )
            session.unclosed = None
            if not session.meta_written:
                await asyncio.to_thread(
                    session.trace_path.parent.mkdir, parents=True, exist_ok=True
                )
                meta_dict = self._session_meta(session)
                payload = meta_dict["payload"]
                session.meta = payload if isinstance(payload, dict) else {}
                self._record(session, message_from_dict(meta_dict))
                session.meta_written = True
            for msg in inputs:
                await self._emit(session, event_log, msg)
            await event_log.publish(bodies.task_state_body(SessionState.RUNNING))
            await self._run_engine(session, event_log, inputs, request, abort)
        except TraceRejected as exc:
            failure = exc.failure
            session.unclosed = UNRECORDED_REASON
            log.error("session %s: %s", session.session_id, failure.message)
        except OSError as exc:  # the trace directory could not be made or repaired
            failure = self._storage_failed(exc)
            log.error("session %s: %s", session.session_id, failure.message)
        except Exception:  # a hub bug must still end the task cleanly
            log.exception("task of session %s failed", session.session_id)
            crashed = True
        finally:
            session.task = None
            session.abort = None
            session.live = session.live_cursor = None
            session.idle_since = time.monotonic()
            session.approvals.deny_all()
            session.updated_at = utc_now()
            session.observed = None
            observed.finished(failed=failure is not None or crashed)
            await event_log.publish(bodies.task_state_body(SessionState.IDLE, failure=failure))

    def _session_meta(self, session: _Session) -> JsonObject:
        payload = self._meta_for(session.session_id, session.workspace)
        return protocol.session_meta(payload, timestamp=session.created_at)

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

    def new_session_model(self) -> tuple[str, str]:
        """``(provider, model_id)`` that a session created now would record."""
        payload = self._meta_for("session-new", self.store.workspaces_dir / "session-new")
        return str(payload.get("provider", "")), str(payload.get("model_id", ""))

    async def _run_engine(
        self,
        session: _Session,
        event_log: EventLog,
        inputs: list[omni_pb2.OmniMessage],
        request: RunRequest,
        abort: AbortSignal,
    ) -> None:
        guard = session.live = RunGuard()
        mode = request.approval_mode or self.default_approval

        async def publish_ask(tool_call: JsonObject) -> EventBody:
            body = bodies.approval_request_body(message_from_dict(tool_call))
            observed.asked(tool_call)  # counted before any client can see the ask
            await event_log.publish(body)
            return body

        read_only: Callable[[str], bool] = (
            self.engine.is_read_only_tool
            if isinstance(self.engine, ReadOnlyTools)
            else (lambda _n: False)
        )
        observed = session.observed or RunObservation()
        approve = session.approvals.make_approver(mode, abort, publish_ask, read_only)
        options = RunOptions(
            session_id=session.session_id,
            approve=observed.approver(approve),
            abort=abort,
            thinking_level=request.thinking_level,
            workspace=session.workspace,
            trace_path=session.trace_path,
            metadata=request.metadata,
        )
        failure: list[str] = []
        rejected: list[TraceRejected] = []

        async def pump() -> None:
            stream = self.engine.run([message_to_dict(m) for m in inputs], options)
            try:
                async for item in stream:
                    msg, as_dict = _decode(item)
                    await self._emit(session, event_log, msg, as_dict)
            except TraceRejected as exc:
                # Nothing more can be recorded, so nothing more is published:
                # the run's client is told through the closing task_state.
                rejected.append(exc)
                abort.set(exc.failure.message, AbortKind.SERVER_FAILURE)
            except ConversionError as exc:
                failure.append(f"engine produced an invalid message: {exc}")
            except Exception as exc:
                log.exception("engine failed in session %s", session.session_id)
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
        if rejected:
            raise rejected[0]
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
                await self._emit(session, event_log, message_from_dict(item))

    # ---- the trace storage -----------------------------------------------------

    def _record(
        self, session: _Session, msg: omni_pb2.OmniMessage, line: bytes | None = None
    ) -> None:
        """Appends one record to the session's trace, or raises TraceRejected."""
        if line is not None and len(line) > self.max_record_bytes:
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
            written = self._writer(session).write(msg, line)
        except OSError as exc:
            raise TraceRejected(self._storage_failed(exc)) from exc
        if written:
            session.message_count += 1
            session.updated_at = utc_now()
            if not self.health.serving:
                self.health.clear(STORAGE)

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
        probe = self.store.traces_dir / f".probe-{os.getpid()}"
        try:
            self.store.traces_dir.mkdir(parents=True, exist_ok=True)
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


async def _read_history(shards: list[Path]) -> AsyncIterator[omni_pb2.OmniMessage]:
    for shard in shards:
        if shard.exists():
            for msg in await asyncio.to_thread(_read_shard, shard):
                yield msg


def _read_shard(path: Path) -> list[omni_pb2.OmniMessage]:
    return [record.message for record in read_jsonl(path, tolerant=True)]


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
