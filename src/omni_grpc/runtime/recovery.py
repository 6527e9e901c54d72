"""Recovery: closing the runs that did not end the ordinary way.

A run whose owner died is closed by whichever replica's sweep takes its
expired lease over (``close_orphan``), the way an abort would. A run the
trace storage stopped is closed in the trace before its session's next run
(``close_unrecorded``). A run whose end could not reach the backend keeps
trying until it can, or until its lease runs out (``finish_later``). The
sessions found on disk at startup are indexed here too (``restore``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path

from omni_grpc.convert import (
    message_from_dict,
    message_to_dict,
)
from omni_grpc.engines.base import AbortSignal, JsonObject
from omni_grpc.protocol.open_run import OpenRun
from omni_grpc.runtime import bodies
from omni_grpc.runtime.approvals import ApprovalBroker
from omni_grpc.runtime.backend import Backend
from omni_grpc.runtime.errors import BackendUnavailable, Fenced, RecordOutOfOrder
from omni_grpc.runtime.event_log import EventLog
from omni_grpc.runtime.events import EventBody, HubEvent
from omni_grpc.runtime.health import BACKEND, HealthState, RunFailure
from omni_grpc.runtime.recorder import Recorder, TraceRejected
from omni_grpc.runtime.run import Run
from omni_grpc.runtime.run_guard import RunGuard
from omni_grpc.runtime.run_lease import RENEW_DEADLINE, Claim, Lease, LeaseKeeper
from omni_grpc.runtime.session_index import SessionRecord
from omni_grpc.runtime.task_ledger import TaskFold, TaskLedger
from omni_grpc.runtime.trace_store import utc_now
from omni_grpc.trace import read_jsonl
from omni_grpc.trace.resume import INTERRUPTED_REASON, recover_shard
from omni_grpc.vocabulary import AbortKind, SessionState
from omni_grpc_proto.omni.v1 import agent_service_pb2, omni_pb2

log = logging.getLogger(__name__)

BACKEND_LOST_REASON = "the session store became unavailable"
# Recorded (once the storage works again) to close a run stopped by it.
UNRECORDED_REASON = "the trace could not be written; the server stopped the run"
# Seconds between probes of a shared backend (health follows it), and the
# most one probe may take, connecting included: a backend that answers
# nothing (paused, or a host gone without a reset) fails its probe then.
BACKEND_PING_SECONDS = 1.0
BACKEND_PROBE_TIMEOUT = 1.0
# So health is NOT_SERVING at most this long after the backend stops
# answering (docs/deployment.md, tests/test_health_under_load.py). The probe
# has its own connection and this loop its own timer, so neither queues
# behind the runs a loaded replica serves.
BACKEND_HEALTH_BOUND = BACKEND_PING_SECONDS + BACKEND_PROBE_TIMEOUT
# Said when the trace holds records past the log's last number, which the
# close publishes first: how many, and the log's last number (the trace's
# record numbers are its records' ordinals, session_meta the 1st).
# benchmarks/durable_chaos.py counts these.
CAUGHT_UP = "%s: publishing %d records the trace holds past the log's last, its number %s"
# How long a run's owner keeps trying to publish its end while the backend
# cannot take it (an outage): the idle TTL of a log, after which nobody
# would read it.
FINISH_WITHIN = 30 * 60.0
# How often a close is made again when the trace moved on under it (a paused
# owner's record landed between its read and its append).
CLOSE_ATTEMPTS = 3
# The most a failed close of an orphan is put off before the next attempt.
CLOSE_BACKOFF_MAX = 30.0
# Idle logs are looked for this often (memory is freed on a timer, not only
# when the next request happens to come).
RECLAIM_EVERY = 60.0


# Recovery.resume: (the taken-over run, its trace's records, the records the
# log never got, the log's window) -> True | False | a close's reason.
ResumeHook = Callable[
    [Run, list[JsonObject], "Sequence[Numbered]", list[HubEvent]], Awaitable[bool | str]
]


class Recovery:
    def __init__(
        self, backend: Backend, recorder: Recorder, health: HealthState, replica_id: str
    ) -> None:
        self.backend = backend
        self.recorder = recorder
        self.traces = recorder.traces
        self.health = health
        self.replica_id = replica_id
        # Closing attempts for runs whose end could not be published yet.
        self.pending_closes: set[asyncio.Task[None]] = set()
        # The orphans this replica is closing, and those whose close failed
        # (how many times, and when to try again): both bounded by the open
        # runs (the sweep forgets the ones that closed).
        self._closing: dict[str, asyncio.Task[None]] = {}
        self._backoff: dict[str, tuple[int, float]] = {}
        # The leases this process holds, claims and runs: it renews them, and
        # its sweep never takes one of them over.
        self.keeper = LeaseKeeper(backend.leases)
        self.ledger = TaskLedger(backend.tasks)
        # Re-drives a taken-over run instead of closing it (``Resumption.take_over``,
        # set by the hub): True when it goes on, a reason to close it with, or
        # False to close it as before.
        self.resume: ResumeHook | None = None
        # Sessions ``restore`` found with a run left open, to be resumed.
        self.restarted: list[SessionRecord] = []

    async def restore(self) -> None:
        """Indexes the sessions recorded under the data dir (after a restart, or
        traces another replica wrote); sessions already indexed are kept.

        A session indexed here for the first time gets its newest shard made
        whole (a crash's torn tail set aside, an interrupted run closed). One
        already indexed is left alone: another replica may be running it, and
        a run whose replica died is closed by the orphan sweep instead."""
        for record in await asyncio.to_thread(self.traces.scan):
            if await self.backend.index.add(record):
                # An open run is left open when it is to be resumed (``restarted``).
                close = self.resume is None
                count, repaired, was_open = await asyncio.to_thread(
                    partial(self.traces.recover, record, close=close)
                )
                if was_open and not close and repaired:
                    self.restarted.append(replace(record, message_count=count))
                if not repaired:  # a read-only or full disk: before the next run
                    await self.backend.index.mark_unclosed(record.session_id, INTERRUPTED_REASON)
                if count != record.message_count:
                    await self.backend.index.recorded(record.session_id, count, utc_now())

    async def close_unrecorded(self, run: Run, reason: str) -> None:
        """Closes, in the trace, the run a failing storage (or a crash whose
        repair the disk refused) left open, on whichever replica it left it:
        the mark is in the session's record (``SessionRecord.unclosed``).

        One journal, two directions: the close the run's clients were sent
        is in the log, numbered as the trace numbers it, so what the log
        holds past the trace's count is recorded first, as sent; whatever
        the repair then closes goes to the log (the trace's records past the
        log's last number)."""
        self.recorder.check_lease(run)
        path = self.traces.paths(run.record)[-1]
        self.traces.forget(run.record)
        if not path.exists():
            self.recorder.unclosed.discard(run.session_id)
            await self._closed(run)
            return
        count = len(await asyncio.to_thread(self.traces.view(run.record).messages))
        run.record = replace(run.record, message_count=count)
        for number, msg in await logged_past(run.log, count):
            if number != run.record.message_count + 1:
                break  # the log lost it (its window moved on): the repair closes the run
            await self.recorder.append(run, msg)  # TraceRejected: still unclosed
        self.recorder.unclosed.discard(run.session_id)
        await self.recorder.count(run)
        recovery = await asyncio.to_thread(recover_shard, path, reason)
        if recovery.closed:
            run.record = replace(
                run.record,
                message_count=run.record.message_count + len(recovery.closed),
                updated_at=utc_now(),
            )
            await self.recorder.count(run)
            tail = await asyncio.to_thread(
                records_past, self.traces.paths(run.record), await run.log.last_record(), []
            )
            if tail:
                await run.log.publish_many(
                    tail_bodies(tail, AbortKind.SERVER_FAILURE), fence=run.lease.token
                )
        await self._closed(run)

    async def _closed(self, run: Run) -> None:
        await self.backend.index.mark_unclosed(run.session_id, None)
        run.record = replace(run.record, unclosed=None)

    async def publish_end(
        self,
        session_id: str,
        event_log: EventLog,
        lease: Lease,
        closing: list[EventBody],
        failure: RunFailure | None = None,
        *,
        fold: TaskFold | None = None,
        last_record: int | None = None,
    ) -> None:
        """``fold``: the run as its owner saw it (None: another replica's run,
        whose record is the session's newest); ``last_record``: the trace's
        count once the run's close is in it."""
        published = await event_log.publish_many(closing, fence=lease.token) if closing else []
        await self.backend.approvals.clear(session_id)
        await self.ledger.ended(
            session_id,
            fold or TaskFold(),
            closing,
            failure.message if failure is not None else None,
            published[-1].event_id if published else None,
            last_record,
        )
        idle = bodies.task_state_body(SessionState.IDLE, failure=failure)
        await event_log.publish(idle, fence=lease.token, end_run=True)

    def finish_soon(
        self,
        run: Run,
        closing: list[EventBody],
        *,
        catch_up: bool = False,
        unrecorded: list[int] | None = None,
    ) -> None:
        """Told no one yet: keep trying until the backend is back (or another
        replica, finding the lease expired, closes the run itself).
        ``catch_up``: the log first gets what only the trace holds;
        ``unrecorded``: the close's records (indexes in ``closing``) the trace
        did not take for want of a confirmed lease, recorded first once the
        lease is renewed, and numbered then."""
        task = asyncio.create_task(
            self._finish_later(run, list(closing), catch_up, list(unrecorded or []))
        )
        self.pending_closes.add(task)
        task.add_done_callback(self.pending_closes.discard)

    async def _finish_later(
        self,
        run: Run,
        closing: list[EventBody],
        catch_up: bool,
        unrecorded: list[int],
    ) -> None:
        # Still renewed (a write that failed for want of a connection, under
        # load, must not leave the run to this replica's own sweep). Tried
        # for as long as the keeper holds the lease, not only while it is
        # valid by the local clock: after a Redis outage longer than the
        # lease the token is still this replica's (the sweeps give an owner
        # a grace to renew once Redis answers, ``sweep_loop``), so the owner
        # closes its own run, a retry period after Redis is back, instead of
        # leaving it to be taken over as lost. Refused: another replica
        # took it over and closes it.
        lost = asyncio.Event()
        self.keeper.keep(run, lost.set)
        delay = 0.1
        deadline = time.monotonic() + FINISH_WITHIN
        try:
            while not lost.is_set() and time.monotonic() < deadline:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(lost.wait(), delay)
                if lost.is_set():
                    return
                delay = min(delay * 2, self.keeper.period)
                if unrecorded:
                    confirmed = await self.keeper.fresh(run, delay)
                    if confirmed is False:
                        return  # taken over: the taker closes trace and log
                    if confirmed is None:
                        continue
                    try:
                        while unrecorded:
                            body = closing[unrecorded[0]]
                            msg = body.decoded_message
                            assert msg is not None
                            if await self.recorder.append(run, msg, body.data):
                                closing[unrecorded[0]] = self.recorder.numbered(run, body)
                            unrecorded.pop(0)
                    except Fenced:
                        if run.lost:
                            return
                        continue
                    except TraceRejected:
                        unrecorded.clear()  # the disk refused: published as sent
                try:
                    await self.recorder.count(run)  # counts lost while the backend was down
                    if catch_up:
                        end = await self.catch_up(run, closing)
                    else:
                        # A try whose answer was lost may have landed: what
                        # of the close the log holds (by number) is not sent
                        # again, it would be refused as a repeat.
                        last = await run.log.last_record()
                        end = [b for b in closing if not _published(b, last)]
                    await self.publish_end(
                        run.session_id, run.log, run.lease, end,
                        fold=run.tasks, last_record=run.record.message_count,
                    )  # fmt: skip
                    return
                except Fenced:
                    return
                except BackendUnavailable:
                    continue
        finally:
            self.keeper.drop(run)

    # ---- runs that never started ----------------------------------------------------

    async def drop_claim(self, session_id: str, keep: Callable[[], int | None]) -> None:
        """A claim whose answer was lost (the backend may have taken it): what
        this replica holds of the session is released now, or as soon as the
        backend answers, so the session is not left busy for a run that never
        started. ``keep``: the token of a task this process runs for it."""
        await self._until_released(
            lambda: self.backend.leases.release_claim(session_id, self.replica_id, keep()),
            self.backend.leases.ttl,
        )

    async def drop_lease(self, lease: Lease) -> None:
        """A run that failed right after its claim: its lease goes at once (or
        as soon as the backend answers, while it is still ours)."""
        await self._until_released(
            lambda: self.backend.leases.release(lease), lease.valid_until - time.monotonic()
        )

    async def _until_released(self, release: Callable[[], Awaitable[bool]], within: float) -> None:
        try:
            await release()
            return
        except BackendUnavailable:
            pass

        async def retry() -> None:
            deadline = time.monotonic() + within
            delay = 0.1
            while time.monotonic() < deadline:
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)
                with contextlib.suppress(BackendUnavailable):
                    await release()
                    return

        task = asyncio.create_task(retry())
        self.pending_closes.add(task)
        task.add_done_callback(self.pending_closes.discard)

    # ---- background work -----------------------------------------------------------

    async def reclaim_loop(self) -> None:
        while True:
            await asyncio.sleep(RECLAIM_EVERY)
            self.backend.logs.reclaim_idle()

    async def watch_backend(self) -> None:
        """Health follows the shared backend: NOT_SERVING while it is down."""
        while True:
            try:
                try:
                    await asyncio.wait_for(self.backend.ping(), BACKEND_PROBE_TIMEOUT)
                except TimeoutError as exc:
                    raise BackendUnavailable(
                        f"no answer within {BACKEND_PROBE_TIMEOUT:g} s"
                    ) from exc
            except BackendUnavailable as exc:
                if self.health.problem(BACKEND) is None:
                    log.error("the session store is unreachable: %s", exc.detail)
                self.health.report(BACKEND, str(exc))
            else:
                if self.health.problem(BACKEND) is not None:
                    log.warning("the session store is reachable again")
                self.health.clear(BACKEND)
            await asyncio.sleep(BACKEND_PING_SECONDS)

    async def sweep_loop(self) -> None:
        """Looks for orphaned runs every ``sweep_interval`` and closes them.

        A run is orphaned when its lease is gone from the backend *and* its
        beat (``RunLease.open_runs``) has not moved for ``grace`` seconds of
        this replica's own clock, counted from an answer that showed it: a
        lease that ran out by Redis's clock alone (Redis was down or stalled,
        so no owner could renew) is not enough, its owner gets ``grace`` once
        Redis answers again. A failed sweep, or one whose answer took longer
        than the grace (Redis stalled), forgets what it saw. The grace is
        the lease's TTL less the interval, so a dead owner's run is still
        closed within the owner-loss timeout of its last renewal. Damped:
        nothing is taken over while this replica's own renewals are late,
        a run this replica holds is never taken over by it, a close under way
        is not started again, and a close that failed is tried again later
        and later (``CLOSE_BACKOFF_MAX``)."""
        interval = self.backend.sweep_interval
        assert interval is not None
        grace = max(self.backend.leases.ttl - interval, interval)
        seen: dict[str, tuple[int, float]] = {}  # session -> (beat, seen since)
        while True:
            slept = time.monotonic()
            await asyncio.sleep(interval)
            sent = time.monotonic()
            if sent - slept - interval > grace:
                # This replica's own loop ran late by more than the grace (a
                # starved machine): it judges no other replica late on what
                # it saw before, but watches again (damping take-overs).
                seen.clear()
            try:
                runs = await self.backend.leases.open_runs()
            except BackendUnavailable:
                seen.clear()  # what was seen says nothing of the time it was down
                continue
            except Exception:
                log.exception("looking for orphaned runs failed")
                seen.clear()
                continue
            answered = time.monotonic()
            if answered - sent > grace:
                # An answer this slow spanned a stall of Redis (or of the link
                # to it) in which no owner could renew: watching starts again.
                seen.clear()
            due = []
            for session_id, beat in runs.items():
                before = seen.get(session_id)
                if before is None or before[0] != beat.count:
                    seen[session_id] = (beat.count, answered)
                elif not beat.leased and sent - before[1] >= grace:
                    due.append((session_id, beat.count))
            for session_id in [sid for sid in seen if sid not in runs]:
                del seen[session_id]  # bounded by the open runs, whatever the churn
            for session_id in [sid for sid in self._backoff if sid not in runs]:
                del self._backoff[session_id]
            if due and self.keeper.late():
                log.warning(
                    "not taking over %d runs: this replica's own lease renewals are late",
                    len(due),
                )
                continue
            for session_id, count in due:
                self._close_soon(session_id, count, sent)

    def _close_soon(self, session_id: str, beat: int, now: float) -> None:
        """Starts closing an orphan in the background (the sweep goes on
        watching meanwhile), unless its close is under way, or put off."""
        if self.keeper.holds(session_id):
            # A lease this process holds (a claim, a run, a close) is renewed
            # by its keeper, never taken over by its own sweep.
            log.warning("session %s: the run lease was renewed late; renewing now", session_id)
            self.keeper.wake()
            return
        if session_id in self._closing:
            return
        tries, not_before = self._backoff.get(session_id, (0, 0.0))
        if now < not_before:
            return
        task = asyncio.create_task(self._close_one(session_id, beat, tries))
        self._closing[session_id] = task
        self.pending_closes.add(task)  # cancelled by a shutdown
        task.add_done_callback(self.pending_closes.discard)
        task.add_done_callback(lambda _: self._closing.pop(session_id, None))

    async def _close_one(self, session_id: str, beat: int, tries: int) -> None:
        try:
            await self.close_orphan(session_id, beat)
        except BackendUnavailable:
            pass  # the next sweep finds it again, if it is still orphaned
        except Fenced:
            # This close's lease lapsed and another replica's sweep took the
            # run over: that replica's close ends the run, not a retry here.
            log.warning("session %s: the run was taken over from this close", session_id)
            self._backoff.pop(session_id, None)
        except Exception:
            log.exception("closing the orphaned run of %s failed", session_id)
            delay = min(CLOSE_BACKOFF_MAX, (self.backend.sweep_interval or 1.0) * 2**tries)
            self._backoff[session_id] = (tries + 1, time.monotonic() + delay)
        else:
            self._backoff.pop(session_id, None)

    async def close_orphan(self, session_id: str, beat: int | None = None) -> None:
        """Closes a run whose owner died: as an abort would, from the log and
        the trace together: the trace's records past the log's last number
        (``records_past``), then the close. ``beat``: the beat the sweep
        saw stand still (the take-over is refused if it moved since).

        The take-over's lease is renewed by this replica's keeper until the
        close is published: a close slowed by a loaded machine is not taken
        over in its turn by another replica's sweep (which would fence it,
        and name this replica as the one that stopped renewing)."""
        lease = await self.backend.leases.take_over(session_id, self.replica_id, beat)
        if lease is None:
            return  # another replica got there first, or the owner renewed
        claim = Claim(lease)
        self.keeper.keep(claim)
        try:
            for attempt in range(CLOSE_ATTEMPTS):
                try:
                    await self._close_taken(session_id, claim)
                    return
                except RecordOutOfOrder:
                    if attempt + 1 == CLOSE_ATTEMPTS:
                        raise
                    # The owner, paused past its lease, wrote a record between
                    # this close's read of the trace and its first append.
                    log.warning("session %s: the trace moved on; closing again", session_id)
        finally:
            self.keeper.drop(claim)

    async def _close_taken(self, session_id: str, claim: Claim) -> None:
        lease = claim.lease
        record = await self.backend.index.get(session_id)
        event_log = self.backend.logs.get(session_id)
        window = await event_log.window()
        tail: Sequence[Numbered] = []
        run: Run | None = None
        recorded: list[JsonObject] | None = None
        if record is not None:
            self.traces.forget(record)  # the dead owner extended the file
            # No fence to raise: the close's records are numbered past what is
            # read here, so a paused owner's late record is refused by the
            # trace's lock, or lands first and this close is refused and made
            # again (``close_orphan``).
            recorded = await asyncio.to_thread(self.traces.view(record).messages)
            # What the dead owner wrote may not all have been counted.
            record = replace(record, message_count=len(recorded))
            # The run holds the lease from here (as last renewed), and is
            # renewed in the claim's place.
            run = Run(record, claim.lease, event_log, AbortSignal(), ApprovalBroker(session_id))
            self.keeper.keep(run)
            # The journal's one rule: what the log lacks is the trace's
            # records past the log's last number.
            last = await event_log.last_record()
            tail = await asyncio.to_thread(records_past, self.traces.paths(record), last, window)
        if not tail and run_ended(window):
            # The claim never became a run (its answer was lost, or the owner
            # died before anything of it was written): nothing to close.
            log.warning("session %s: releasing a run that never started", session_id)
            await self.backend.leases.release(lease)
            if run is not None:
                self.keeper.drop(run)
            return
        reason = taken_over_reason(lease)
        if run is not None and recorded is not None and self.resume is not None:
            if not await self.keeper.fresh(run, max(self.backend.leases.ttl, RENEW_DEADLINE)):
                self.keeper.drop(run)
                raise BackendUnavailable("the take-over's lease was not renewed in time")
            try:
                outcome = await self.resume(run, recorded, tail, window)
            except BaseException:
                self.keeper.drop(run)  # the next sweep tries again
                raise
            if outcome is True:
                return  # the run goes on here; its task holds the lease now
            if isinstance(outcome, str):
                reason = outcome
        log.warning("session %s: closing the run: %s", session_id, reason)
        guard = RunGuard()
        for event in current_run(window):
            message = event.message  # decoded on each access for a kept event
            if message is not None:
                guard.observe(message_to_dict(message))
        tail = with_stops(guard, tail)
        if recorded is not None:
            # The calls owed an output are the trace's, not the log's: the
            # trace is written first, so it may hold outputs the log never
            # got (an output written twice fails the trace, #25).
            guard.calls = unanswered_calls(recorded)
        lost = AbortKind.REPLICA_LOST
        closing = tail_bodies(
            [
                (None, message_from_dict(item))
                for item in guard.closing_messages(
                    aborted=True, reason=reason, error=None, answer_calls=True
                )
            ],
            lost,
        )
        try:
            if run is not None:
                # Reading and fencing the trace may have outlasted the lease's
                # local validity on a loaded machine: the close waits for the
                # keeper's next answer rather than failing (and being taken
                # over again later).
                if not await self.keeper.fresh(run, max(self.backend.leases.ttl, RENEW_DEADLINE)):
                    raise BackendUnavailable("the take-over's lease was not renewed in time")
                for index, body in enumerate(closing):
                    msg = body.decoded_message
                    assert msg is not None
                    with contextlib.suppress(TraceRejected):
                        if await self.recorder.append(run, msg, body.data):
                            closing[index] = self.recorder.numbered(run, body)
                await self.recorder.count(run)
            await self.publish_end(
                session_id, event_log, lease, tail_bodies(tail, lost) + closing,
                last_record=run.record.message_count if run is not None else None,
            )  # fmt: skip
        finally:
            if run is not None:
                self.keeper.drop(run)

    async def catch_up(self, run: Run, closing: list[EventBody]) -> list[EventBody]:
        """The end of a run whose log writes failed (the backend went away):
        the trace's records past the log's last number, then the close (its
        bodies carry the fragment stops and abort kind the trace does not
        keep; those it recorded are numbered, and not taken twice)."""
        last = await run.log.last_record()
        window = await run.log.window()
        tail = await asyncio.to_thread(records_past, self.traces.paths(run.record), last, window)
        own = {b.record for b in closing if b.record is not None}
        engine_part = [(n, m) for n, m in tail if n not in own]
        kept = [b for b in closing if not _published(b, last)]
        if not engine_part:
            return kept
        guard = RunGuard()
        for event in current_run(window):
            if (message := event.message) is not None:
                guard.observe(message_to_dict(message))
        return tail_bodies(with_stops(guard, engine_part), AbortKind.SERVER_FAILURE) + kept


def _published(body: EventBody, last: int | None) -> bool:
    """The log holds ``body`` already: a record numbered up to its last."""
    return body.record is not None and last is not None and body.record <= last


def taken_over_reason(lease: Lease) -> str:
    """What the clients of a run taken over are told: whose run it was, that
    it stopped renewing its lease (and when it last did), and who closed it."""
    base = AbortKind.REPLICA_LOST.default_reason
    if lease.taken_from is None:
        return f"{base}; replica {lease.owner} took the run over"
    ago = "" if lease.renewed_ago is None else f", last renewed {lease.renewed_ago:.1f} s before"
    return (
        f"{base}: replica {lease.taken_from} stopped renewing its run lease{ago}; "
        f"replica {lease.owner} took the run over"
    )


# A trace record with its record number; None for a fragment stop the close
# adds (not a record: the trace keeps no partials).
Numbered = tuple[int | None, omni_pb2.OmniMessage]


def tail_bodies(messages: Sequence[Numbered], kind: AbortKind) -> list[EventBody]:
    out = []
    for number, m in messages:
        body = bodies.message_body(m, kind if m.WhichOneof("payload") == "abort" else None)
        out.append(replace(body, record=number) if number is not None else body)
    return out


def with_stops(guard: RunGuard, tail: Sequence[Numbered]) -> list[Numbered]:
    """``tail`` as the run's clients must read it after what the log holds: a
    complete message in the trace whose fragment the log left open gets that
    fragment's ``stop`` before it (the trace keeps no partials). Feeds
    ``guard`` all of it, so it closes only what is still open after."""
    out: list[Numbered] = []
    for number, msg in tail:
        kind = msg.WhichOneof("payload") or ""
        call_id = getattr(getattr(msg, kind), "tool_call_id", "") if kind else ""
        for fragment in guard.open.fragments:
            if (
                fragment.origin == ()
                and fragment.kind.value == kind
                and (fragment.tool_call_id == call_id or not call_id)
            ):
                stop = fragment.finish(_stop_word(msg))[0]
                guard.observe(stop)
                out.append((None, message_from_dict(stop)))
                break
        guard.observe(message_to_dict(msg))
        out.append((number, msg))
    return out


def _stop_word(msg: omni_pb2.OmniMessage) -> str:
    """The complete message's stop_reason as the reference spells it."""
    value = message_to_dict(msg).get("payload", {}).get("stop_reason")
    return str(value) if isinstance(value, str) else "completed"


def records_past(
    shards: Sequence[Path], last: int | None, window: list[HubEvent]
) -> list[tuple[int, omni_pb2.OmniMessage]]:
    """The trace's records numbered past ``last`` (the log's last record
    number), with their numbers: what the log lacks of the journal.

    The trace is written first (a record is in it before anyone can see
    it), so a run stopped between the two writes (its replica died, the
    backend went away) leaves the trace ahead; the record number both store
    says where the log stopped, whatever the records' bytes (records recur
    byte for byte, #25). A log with no number yet: a log that holds no
    message and kept its start never got one of the session's records (its
    first run stopped before its first publish), so it lacks all but
    ``session_meta``; one that holds messages without numbers was written
    by 0.3, which numbered nothing: nothing can be told, ``[]``."""
    if last is None:
        if any(e.body.is_message for e in window) or (window and window[0].seq != 1):
            return []
        last = 1  # session_meta, never published
    out: list[tuple[int, omni_pb2.OmniMessage]] = []
    number = 0
    for shard in shards:
        try:
            records = read_jsonl(shard, tolerant=True)
            for record in records:
                number += 1
                if number > last:
                    out.append((number, record.message))
        except OSError:
            break
    if out:
        log.warning(CAUGHT_UP, shards[-1].name, len(out), last)
    return out


async def logged_past(event_log: EventLog, count: int) -> list[tuple[int, omni_pb2.OmniMessage]]:
    """The log's records numbered past ``count`` (the trace's): a close the
    trace refused, which its clients were sent numbered as the trace will
    number it. In number order, as far as the window still holds them."""
    out = []
    for event in await event_log.window():
        number = event.body.record
        if number is not None and number > count and (message := event.message) is not None:
            out.append((number, message))
    return out


def unanswered_calls(recorded: list[JsonObject]) -> dict[str, str | None]:
    """The trace's completed tool calls without an output, in call order,
    each with its recorded approval decision (None: none was made)."""
    state = OpenRun()
    for item in recorded:
        state.observe(item)
    return state.calls


def run_ended(events: list[HubEvent]) -> bool:
    """The log's last event is a ``task_state idle``: its last run was closed."""
    for event in reversed(events):
        ev = event.server_event
        if ev is not None and ev.WhichOneof("kind") == "task_state":
            return bool(ev.task_state.state == agent_service_pb2.SESSION_STATE_IDLE)
        if ev is None:
            return False
    return True  # an empty log: nothing was ever started


def current_run(events: list[HubEvent]) -> list[HubEvent]:
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
