"""The run task: one engine run driven from its input to its closing
``task_state idle``.

A task publishes, in order: the run's input messages, ``task_state
running``, every engine message, and ``task_state idle``. The trace gets
``session_meta`` (first run only), the input, then every recordable engine
message, each before it is published (``emit``). ``RunTasks`` holds the runs
this process executes; nothing here is shared with another replica.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from omni_grpc.convert import ConversionError, message_from_dict, message_to_dict
from omni_grpc.engines.base import (
    AbortSignal,
    Engine,
    JsonObject,
    ReadOnlyTools,
    RunOptions,
    WireMessage,
)
from omni_grpc.runtime import bodies
from omni_grpc.runtime.approvals import ApprovalMode
from omni_grpc.runtime.backend import Backend
from omni_grpc.runtime.errors import BackendUnavailable, Fenced
from omni_grpc.runtime.events import EventBody, HubEvent
from omni_grpc.runtime.health import RunFailure
from omni_grpc.runtime.interface import RunRequest
from omni_grpc.runtime.observer import HubObserver
from omni_grpc.runtime.recorder import Recorder, TraceRejected
from omni_grpc.runtime.recovery import BACKEND_LOST_REASON, UNRECORDED_REASON, Recovery
from omni_grpc.runtime.resumption import TaskOptions, forget_options, save_options
from omni_grpc.runtime.run import Run
from omni_grpc.runtime.run_lease import RENEW_DEADLINE
from omni_grpc.runtime.session_index import session_mode
from omni_grpc.runtime.task_ledger import TaskLedger
from omni_grpc.vocabulary import AbortKind, Decision, SessionState
from omni_grpc_proto.omni.v1 import omni_pb2

log = logging.getLogger(__name__)


class RunTasks:
    def __init__(
        self,
        engine: Engine,
        backend: Backend,
        recorder: Recorder,
        recovery: Recovery,
        observer: HubObserver,
        *,
        default_approval: ApprovalMode,
        abort_grace: float,
    ) -> None:
        self.engine = engine
        self.backend = backend
        self.recorder = recorder
        self.recovery = recovery
        self.traces = recorder.traces
        self.observer = observer
        self.default_approval = default_approval
        self.abort_grace = abort_grace
        self.ledger = TaskLedger(backend.tasks)
        # Tasks are written down to be resumed (``runtime/resumption.py``).
        self.resumable = False
        # The runs this process executes, by session id.
        self.runs: dict[str, Run] = {}

    def start(self, run: Run, inputs: list[omni_pb2.OmniMessage], request: RunRequest) -> None:
        """Starts the run's task; its lease is renewed (it took the claim's
        place in the keeper) until the run's end is published."""
        self.runs[run.session_id] = run
        self.recovery.keeper.keep(run, lambda: self._lease_lost(run))
        run.task = asyncio.create_task(
            self._drive(run, inputs, request), name=f"omni-run-{run.session_id}"
        )

    def resume(self, run: Run, engine_input: list[JsonObject], request: RunRequest) -> None:
        """Starts the engine again on a task another process was running
        (``Resumption.take_over``): its input and ``task_state running`` are
        out already, and the interruption is recorded; the engine gets the
        carried-over input and reads the rest in the trace."""
        self.runs[run.session_id] = run
        self.recovery.keeper.keep(run, lambda: self._lease_lost(run))
        run.task = asyncio.create_task(
            self._drive(run, [], request, resumed=engine_input),
            name=f"omni-run-{run.session_id}",
        )

    async def _drive(
        self,
        run: Run,
        inputs: list[omni_pb2.OmniMessage],
        request: RunRequest,
        resumed: list[JsonObject] | None = None,
    ) -> None:
        failed: str | None = None
        failure: RunFailure | None = None
        run.observed = self.observer.run_started(run.session_id, run.abort, inputs)
        crashed = False
        closing: list[EventBody] = []
        try:
            if resumed is not None:
                # The same task: its record goes on (asked, decided, ended).
                run.tasks.record = await self.ledger.newest(run.session_id)
                await self._run_engine(run, resumed, request)
                await self._settle(run)
                return
            if run.record.unclosed is not None:
                await self.recovery.close_unrecorded(run, run.record.unclosed)
            if run.record.message_count == 0:
                await self._confirm_lease(run)
                meta = message_from_dict(self.recorder.session_meta(run.record))
                # Counted in the background, as every record of the run is:
                # not a round trip before the run's first event.
                if await self.recorder.append(run, meta):
                    self.recorder.count_soon(run)
            first_record = run.record.message_count + 1
            engine_input, first = await self._emit_inputs(run, inputs)
            await run.log.publish(
                bodies.task_state_body(SessionState.RUNNING), fence=run.lease.token
            )
            # Published in order, so the first input's event is out by now.
            await self.ledger.started(
                run.tasks, run.session_id, await first, request.message_id, first_record
            )
            if self.resumable:
                # What a process that resumes the task runs it with.
                await self._save_options(run, TaskOptions(request, time.time()))
            await self._run_engine(run, engine_input, request)
            await self._settle(run)  # a write that failed after the engine ended
        except Fenced:
            run.lost = True
            log.warning("session %s: fenced by another replica; the task stops", run.session_id)
        except TraceRejected as exc:
            # The message the trace refused is not published; the run's end is,
            # so its clients read that it failed (and why) in the stream itself.
            failure = exc.failure
            log.error("session %s: %s", run.session_id, failure.message)
            closing = await self._close_failed(run, failure.message)
        except OSError as exc:  # the trace directory could not be made or repaired
            failure = self.recorder.storage_failed(exc)
            log.error("session %s: %s", run.session_id, failure.message)
            closing = await self._close_failed(run, failure.message)
        except BackendUnavailable as exc:
            failed = str(exc)
            log.error("session %s: run failed: %s", run.session_id, exc)
        except Exception:  # a hub bug must still end the task cleanly
            log.exception("task of session %s failed", run.session_id)
            crashed = True
            with contextlib.suppress(Exception):
                closing = await self._close_failed(run, AbortKind.SERVER_FAILURE.default_reason)
        finally:
            run.approvals.end_all()
            self.runs.pop(run.session_id, None)
            run.observed.finished(failed=failure is not None or failed is not None or crashed)
            try:
                if not run.lost:
                    # Still renewed: publishing the end may queue behind load.
                    await self._finish(run, failed, failure, closing)
            finally:
                self.recovery.keeper.drop(run)
                self.backend.logs.release(run.session_id)

    async def _finish(
        self,
        run: Run,
        failed: str | None,
        failure: RunFailure | None,
        closing: list[EventBody],
    ) -> None:
        """Ends the run in the log: closing messages if it failed, then idle."""
        unrecorded: list[int] = []
        if failed is not None:
            closing, unrecorded = await self._close_in_trace(run, BACKEND_LOST_REASON, failed)
            # What failed to reach the log is in the trace; the close says so.
            run.log.forgive(run.lease.token)
        last = run.last_publish
        if last is not None and last.done() and last.exception() is None:
            run.tasks.published = last.result().event_id
        if unrecorded:
            # Its lease could not be confirmed (the backend is away): the
            # close goes into the trace once it is, then to the log.
            self.recovery.finish_soon(run, closing, catch_up=True, unrecorded=unrecorded)
            return
        try:
            await self.recorder.count(run)
            if failed is not None:
                # The log ends as the trace does: what only the trace got, then its close.
                closing = await self.recovery.catch_up(run, closing)
            await self.recovery.publish_end(
                run.session_id, run.log, run.lease, closing, failure,
                fold=run.tasks, last_record=run.record.message_count,
            )  # fmt: skip
        except Fenced:
            pass
        except BackendUnavailable:
            self.recovery.finish_soon(run, closing, catch_up=failed is not None)

    async def _close_failed(self, run: Run, reason: str) -> list[EventBody]:
        """The messages that end a run the server stopped (fragments and the
        request closed ``failed``, ``request_end`` carrying ``reason``, then
        ``abort``), for its clients. Recorded now if the trace takes them;
        otherwise published with the numbers the trace will give them, and
        recorded from the log before the session's next run
        (``Recovery.close_unrecorded``)."""
        out: list[EventBody] = []
        owed = 0  # how many of the close the trace refused: numbered as it will number them
        # A trace that holds nothing, not even its session_meta (the disk
        # refused the first write), has no run to close: a close alone would
        # make it a trace that does not open with its session_meta.
        recording = run.record.message_count > 0
        for item in run.guard.closing_messages(aborted=False, reason=reason, error=reason):
            msg = message_from_dict(item)
            kind = AbortKind.SERVER_FAILURE if msg.WhichOneof("payload") == "abort" else None
            body = bodies.message_body(msg, kind)
            if len(body.data) > self.recorder.max_record_bytes:
                continue  # the complete the record limit refused: its stop stands for it
            if recording and not owed and not run.lost:
                try:
                    if await self.recorder.append(run, msg, body.data):
                        self.recorder.count_soon(run)
                        body = self.recorder.numbered(run, body)
                except TraceRejected:
                    owed = 1
                except Fenced:
                    return []  # another replica owns the run now
            elif recording:
                owed += 1
            if owed:
                body = replace(body, record=run.record.message_count + owed)
            out.append(body)
        if owed:
            self.recorder.unclosed.add(run.session_id)
            try:  # the next run closes it, whichever replica it lands on
                await self.backend.index.mark_unclosed(run.session_id, UNRECORDED_REASON)
            except BackendUnavailable:
                log.error("session %s: could not mark its run unclosed", run.session_id)
        return out

    async def _close_in_trace(
        self, run: Run, reason: str, error: str
    ) -> tuple[list[EventBody], list[int]]:
        """Records the run's close in the trace and returns it, with what of it
        the trace did not take yet because the lease could not be confirmed
        (the backend went away with its renewals): that part is recorded
        once it is (``Recovery.finish_soon``). A trace that refuses the
        close (a full disk) is not asked again."""
        out: list[EventBody] = []
        unrecorded: list[int] = []  # indexes in ``out``
        closing = run.guard.closing_messages(
            aborted=False, reason=reason, error=error, answer_calls=True
        )
        for item in closing:
            msg = message_from_dict(item)
            kind = AbortKind.SERVER_FAILURE if msg.WhichOneof("payload") == "abort" else None
            body = bodies.message_body(msg, kind)
            if not unrecorded:
                try:
                    if await self.recorder.append(run, msg, body.data):
                        # Numbered once recorded, whether or not the count
                        # below reaches the backend (the end counts again).
                        body = self.recorder.numbered(run, body)
                        await self.recorder.count(run)
                except Fenced:
                    if run.lost:
                        unrecorded = []  # taken over: the taker closes the trace
                    else:
                        unrecorded.append(len(out))
                except (TraceRejected, BackendUnavailable):
                    pass
            elif not run.lost:
                unrecorded.append(len(out))
            out.append(body)
        return out, unrecorded

    async def _emit_inputs(
        self, run: Run, inputs: list[omni_pb2.OmniMessage]
    ) -> tuple[list[JsonObject], asyncio.Future[HubEvent]]:
        """Records and publishes the run's input; returns it as the engine reads
        it, and the publication of its first message (the task's first event).
        Each message is let go once emitted (``inputs`` ends empty): the
        engine has its dict, and a prompt may be megabytes, not to be held twice
        for the whole run."""
        engine_input: list[JsonObject] = []
        first: asyncio.Future[HubEvent] | None = None
        while inputs:
            msg = inputs.pop(0)
            as_dict = message_to_dict(msg)
            await self._emit(run, msg, as_dict)
            first = first or run.last_publish
            engine_input.append(as_dict)
        assert first is not None  # a run has input (``check_input``)
        return engine_input, first

    async def _settle(self, run: Run) -> None:
        """Waits for what was queued for the log; raises its failure."""
        if run.last_publish is not None:
            await run.last_publish

    async def _emit(
        self,
        run: Run,
        msg: omni_pb2.OmniMessage,
        as_dict: Mapping[str, Any] | None = None,
        encoded: EventBody | None = None,
    ) -> None:
        """Records and publishes one message, encoded once (``encoded``:
        ``msg``'s body, when it was encoded with its decoding from the
        engine's dict ``as_dict``)."""
        if run.lost:
            raise Fenced(run.session_id, run.lease.token)
        last = run.last_publish
        if last is not None and last.done() and last.exception() is not None:
            # The backend failed: said at once, not after waiting for a
            # renewal the same backend cannot give.
            raise last.exception()  # type: ignore[misc]
        await self._confirm_lease(run)
        # Partials and child-session messages are never recorded; skipping them
        # here keeps the writer's full check off the hot path of every delta.
        arm = msg.WhichOneof("payload") or ""
        kind = _abort_kind(run.abort) if arm == "abort" else None
        # Encoded once, for the trace and every transport.
        if encoded is not None:
            body = bodies.with_abort_kind(encoded, kind)
        else:
            body = bodies.message_body(msg, kind)
        written = False
        if not arm.startswith("partial_") and not msg.origin:
            written = await self.recorder.append(run, msg, body.data)
            if written:
                body = self.recorder.numbered(run, body)
        # Observed once recorded, before anything else can fail: the closing
        # messages of a run cut short must not repeat what the trace holds.
        # The engine's own form: a dict it yielded, else the proto (the guard
        # reads both), never a second conversion of the message.
        run.guard.observe(as_dict if as_dict is not None else msg)
        if written:
            self.recorder.count_soon(run)
        run.tasks.message(msg, kind)
        if arm == "approval_decision" and not msg.origin:
            await self.ledger.decided(run.tasks, msg.approval_decision.tool_call_id)
        # Queued, not awaited: the engine goes on while the backend writes what
        # queued meanwhile in one round trip. When the backend is behind, or a
        # reader that keeps up is about to fall out of the window, it waits.
        run.last_publish = run.log.publish_nowait(body, fence=run.lease.token)
        if run.log.congested:
            await run.last_publish
        run.observed.message(msg, arm, kind)

    async def _confirm_lease(self, run: Run) -> None:
        """Before a trace write: a lease past its local expiry (its renewal
        came late: Redis slow to answer, the machine starved) waits for the
        keeper's next round rather than the run giving itself up at once. Past
        the renew deadline the run fails as when the backend is down (it is,
        for this replica); refused, the write is fenced (``check_lease``)."""
        if run.lost or run.lease.still_valid():
            return
        deadline = max(self.backend.leases.ttl, RENEW_DEADLINE)
        if await self.recovery.keeper.fresh(run, deadline) is None:
            raise BackendUnavailable(f"the run lease was not renewed within {deadline:g} s")

    async def _save_options(self, run: Run, task: TaskOptions) -> None:
        """Writes the task's options for a resumption. A disk that refuses them
        does not stop the run (the trace is the record; a trace write that
        fails stops it): the run goes on, resumable with the defaults."""
        first_shard = self.traces.paths(run.record)[0]
        try:
            await asyncio.to_thread(save_options, first_shard, task)
        except OSError as exc:
            log.warning(
                "session %s: the task's options were not written (%s); "
                "a resumption would run it with the defaults", run.session_id, exc,
            )  # fmt: skip
            with contextlib.suppress(OSError):
                await asyncio.to_thread(forget_options, first_shard)

    def hand_over(self, run: Run) -> None:
        """Stops the run's task writing nothing more, its lease no longer
        renewed: the run is left as a lost process leaves it, for another
        replica's sweep (or this server's next start) to resume. A record
        being appended finishes on its thread; the taker publishes what the
        log did not get."""
        log.warning("session %s: handing the run over", run.session_id)
        run.lost = True
        self.recovery.keeper.drop(run)
        if run.task is not None:
            run.task.cancel()

    def _lease_lost(self, run: Run) -> None:
        """Another replica took the run over: it stops, writing nothing more."""
        if self.runs.get(run.session_id) is not run:
            # Its task has ended and its end is being published, which ends
            # the lease too (a renewal sent meanwhile is refused); if another
            # replica took it over, that publish is fenced.
            return
        log.warning("session %s: lost the run lease; stopping the task", run.session_id)
        run.lost = True
        abort_local(run, None, AbortKind.REPLICA_LOST)

    async def _run_engine(
        self, run: Run, engine_input: list[JsonObject], request: RunRequest
    ) -> None:
        guard, abort = run.guard, run.abort
        session_id = run.session_id
        # A task's own mode wins; else the session's, read again at each call
        # (another replica may have changed it), else the server's.
        start_mode = request.approval_mode or session_mode(run.record) or self.default_approval

        async def mode_now() -> ApprovalMode:
            if request.approval_mode is not None:
                return request.approval_mode
            try:
                record = await self.backend.index.get(session_id)
            except BackendUnavailable:
                return start_mode
            return (session_mode(record) if record else None) or self.default_approval

        async def publish_ask(tool_call_id: str, tool_call: JsonObject) -> None:
            body = bodies.approval_request_body(message_from_dict(tool_call))
            # Pending first: a client that sees the request can approve it at once.
            await self.backend.approvals.add(session_id, tool_call_id, body)
            run.observed.asked(tool_call)  # counted before any client can see the ask
            await self.ledger.asked(run.tasks, tool_call_id)  # likewise
            await run.log.publish(body, fence=run.lease.token)

        async def forget_ask(tool_call_id: str) -> None:
            with contextlib.suppress(BackendUnavailable):
                await self.backend.approvals.take(session_id, tool_call_id)

        async def expire_ask(tool_call_id: str) -> Decision | None:
            try:
                decided = await self.backend.approvals.expire(session_id, tool_call_id)
            except BackendUnavailable:
                return None  # the store cannot say: the wait's outcome stands
            return None if decided is None else Decision(decided)

        read_only: Callable[[str], bool] = (
            self.engine.is_read_only_tool
            if isinstance(self.engine, ReadOnlyTools)
            else (lambda _n: False)
        )
        options = RunOptions(
            session_id=session_id,
            approve=run.observed.approver(
                run.approvals.make_approver(
                    mode_now, abort, publish_ask, forget_ask, read_only, expire_ask
                )
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
            stream = self.engine.run(engine_input, options)
            try:
                async for item in stream:
                    if isinstance(item, WireMessage):
                        # Relayed: its text is read from the bytes it came
                        # as, and those are recorded and sent as they are.
                        relayed = item.message
                        for closing in guard.before_engine_abort(relayed):
                            await self._emit(run, message_from_dict(closing))
                        body = bodies.message_body(relayed, wire=item.wire)
                        await self._emit(run, relayed, encoded=body)
                        del item, relayed, body
                        continue
                    # The engine's own abort, with what it left open closed first.
                    for closing in guard.before_engine_abort(item):
                        await self._emit(run, message_from_dict(closing))
                    if isinstance(item, omni_pb2.OmniMessage):
                        # Encoded once, and the guard reads the proto itself.
                        await self._emit(run, item)
                    else:
                        msg, body = bodies.engine_message(item)
                        await self._emit(run, msg, item, body)
                        del msg, body
                    # Not held while the engine makes the next one: a large
                    # message is let go once its readers have it.
                    del item
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


def abort_local(run: Run, reason: str | None, kind: AbortKind) -> None:
    run.abort.set(reason or kind.default_reason, kind)
    run.approvals.end_all()


def _abort_kind(signal: AbortSignal | None) -> AbortKind:
    """Who ended the run: whoever set the signal; an engine that aborts with no
    signal set gave up on its own (the reference's ``llm request error``)."""
    if signal is not None and signal.is_set() and signal.kind is not None:
        return signal.kind
    return AbortKind.ENGINE_FAILURE
