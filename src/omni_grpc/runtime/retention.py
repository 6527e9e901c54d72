"""How sessions end: deleted on request (DeleteSession) or after an idle TTL.

A deletion first moves the session from live to deleting in the index
(``SessionLifecycle``): from that step on no run starts on it, on any
replica and through any transport, since a run's claim checks the same
record atomically (``RunLease.claim``). It then aborts the session's task,
so its stream sees the abort and ``task_state idle`` as for any abort, waits
for the task to end (nothing of it is written after that), removes what the
session holds in the backend and moves or removes its files, and only then
forgets the record: a delete is final, also across a restart, which finds
nothing of the session where it looks. Expiry is the same deletion, chosen by
a sweep over the index; every replica sweeps, and a deletion another replica
already began is not an error.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime, timedelta

from omni_grpc.runtime.backend import Backend
from omni_grpc.runtime.errors import SessionNotFound, StorageUnavailable
from omni_grpc.runtime.health import storage_failure
from omni_grpc.runtime.limits import Limits
from omni_grpc.runtime.recorder import Recorder
from omni_grpc.runtime.run import Run
from omni_grpc.runtime.session_index import SessionRecord
from omni_grpc.runtime.trace_store import TraceStore
from omni_grpc.vocabulary import SessionLifecycle

log = logging.getLogger(__name__)

# The abort reason of a task whose session is deleted.
DELETED_REASON = "session deleted"

# Signals a session's running task, wherever it runs (``Hub.abort``).
AbortFn = Callable[[str, str], Awaitable[bool]]
# The session's record, or SessionNotFound.
RecordFn = Callable[[str], Awaitable[SessionRecord]]


class Retention:
    def __init__(
        self,
        backend: Backend,
        recorder: Recorder,
        traces: TraceStore,
        limits: Limits,
        runs: Mapping[str, Run],
        *,
        record: RecordFn,
        abort: AbortFn,
    ) -> None:
        self._backend = backend
        self._recorder = recorder
        self._traces = traces
        self._limits = limits
        self._runs = runs
        self._record = record
        self._abort = abort

    async def delete(self, session_id: str, *, delete_trace: bool = False) -> bool:
        """Ends a session: no run starts on it from the first step; its
        running task is aborted and waited for; its replay buffer, pending
        approvals and its runs in the task index are freed, and this process's
        streams on it end (transports tell them ``SessionDeleted``). The trace
        and the workspace are removed (``delete_trace``) or kept under
        ``<data-dir>/deleted/``; then the index forgets the session. A step
        that fails makes the session live again (the delete can be asked
        again). True when a task was running."""
        await self._record(session_id)
        index = self._backend.index
        if not await index.advance(session_id, SessionLifecycle.LIVE, SessionLifecycle.DELETING):
            raise SessionNotFound(session_id)  # a concurrent delete came first
        try:
            # Before any step: a delete whose replica dies from here on is
            # finished by the next start (``finish_marked``), not undone.
            await asyncio.to_thread(self._traces.mark_delete, session_id, delete=delete_trace)
        except OSError as exc:
            with contextlib.suppress(Exception):
                await index.advance(session_id, SessionLifecycle.DELETING, SessionLifecycle.LIVE)
            failure = storage_failure(exc)
            raise StorageUnavailable(
                failure.message.replace("the run was stopped", "the session was not deleted"),
                exhausted=failure.code == "resource_exhausted",
            ) from exc
        try:
            was_running = await self._abort(session_id, DELETED_REASON)
            if was_running:
                await self._until_idle(session_id)
            record = await index.get(session_id)  # as the run left it
            if record is None:
                raise SessionNotFound(session_id)
            await self._free(session_id)
            await asyncio.to_thread(self._traces.remove, record, delete=delete_trace)
        except BaseException:
            with contextlib.suppress(Exception):
                await index.advance(session_id, SessionLifecycle.DELETING, SessionLifecycle.LIVE)
                await asyncio.to_thread(self._traces.unmark_delete, session_id)
            raise
        await index.advance(session_id, SessionLifecycle.DELETING, SessionLifecycle.DELETED)
        await self._unmark(session_id)
        return was_running

    async def _free(self, session_id: str) -> None:
        """A deleted session's shared state: its pending approvals, its runs in
        the task index, its event log (and this process's streams on it)."""
        await self._backend.approvals.clear(session_id)
        await self._backend.tasks.remove_session(session_id)
        await self._backend.logs.drop(session_id)
        self._recorder.unclosed.discard(session_id)

    async def _unmark(self, session_id: str) -> None:
        try:
            await asyncio.to_thread(self._traces.unmark_delete, session_id)
        except OSError:  # the delete is done; finishing it again finds nothing to do
            log.warning("session %s: deleted, but its delete mark stays", session_id)

    async def finish_marked(self) -> list[str]:
        """Finishes the deletes a replica began and did not end (it died, or
        its disk failed mid-way), at start before the traces are indexed: the
        session's files are removed or moved as its delete asked, its shared
        state freed, its record gone. A session a failed delete made live
        again keeps its files (only its mark goes)."""
        marked = await asyncio.to_thread(self._traces.marked_deletes)
        if not marked:
            return []
        on_disk = {r.session_id: r for r in await asyncio.to_thread(self._traces.scan)}
        finished = []
        for session_id, purge in marked.items():
            indexed = await self._backend.index.get(session_id)
            if indexed is not None and indexed.lifecycle is not SessionLifecycle.DELETING:
                await self._unmark(session_id)  # undone, not interrupted
                continue
            # The shards as the index knew them, else as the disk has them;
            # none left (all moved): the workspace alone.
            record = indexed or on_disk.get(session_id) or SessionRecord(session_id, "", "", 0, ())
            log.warning("session %s: finishing a delete its replica did not end", session_id)
            await self._free(session_id)
            await asyncio.to_thread(self._traces.remove, record, delete=purge)
            if indexed is not None:
                await self._backend.index.advance(
                    session_id, SessionLifecycle.DELETING, SessionLifecycle.DELETED
                )
            await self._unmark(session_id)
            finished.append(session_id)
        return finished

    async def _until_idle(self, session_id: str) -> None:
        """Waits for the aborted task to end, wherever it runs."""
        run = self._runs.get(session_id)
        if run is not None and run.task is not None:
            await asyncio.shield(run.task)
            return
        while await self._backend.leases.running([session_id]):
            await asyncio.sleep(0.05)  # another replica closes it within its abort grace

    async def end_deleted_loop(self, interval: float) -> None:
        """Ends this replica's streams on sessions another replica deleted,
        every ``interval`` seconds: the deleting replica ends only its own,
        and this replica's reader would otherwise wait on the deleted stream
        for ever. Their transports then tell the clients the session was
        deleted (gRPC ``NOT_FOUND``), as on the deleting replica."""
        while True:
            await asyncio.sleep(interval)
            try:
                await self.end_deleted()
            except Exception:  # the store down, or a failing drop: the next pass retries
                log.debug("ending the streams of deleted sessions failed", exc_info=True)

    async def end_deleted(self) -> list[str]:
        """One pass of :meth:`end_deleted_loop`; the sessions whose streams it ended."""
        ended = []
        for session_id in self._backend.logs.watched():
            if await self._backend.index.get(session_id) is None:
                log.info("session %s: deleted by another replica; ending its streams", session_id)
                await self._backend.logs.drop(session_id)
                ended.append(session_id)
        return ended

    async def expire_loop(self) -> None:
        """Deletes sessions idle for longer than ``limits.session_ttl``."""
        ttl = self._limits.session_ttl
        while True:
            await asyncio.sleep(min(ttl / 2, 60.0))
            try:
                await self.expire_idle()
            except Exception:  # a failing sweep must not stop the next one
                log.exception("deleting expired sessions failed")

    async def expire_idle(self) -> list[str]:
        """Deletes the sessions idle (no run, no stream here) past the TTL."""
        ttl = self._limits.session_ttl
        if math.isinf(ttl):
            return []
        cutoff = datetime.now(UTC) - timedelta(seconds=ttl)
        records = await self._backend.index.list()
        running = await self._backend.leases.running([r.session_id for r in records])
        expired = []
        for record in records:
            sid = record.session_id
            if sid in running or self._backend.logs.get(sid).subscriber_count:
                continue
            if datetime.fromisoformat(record.updated_at.replace("Z", "+00:00")) > cutoff:
                continue
            with contextlib.suppress(SessionNotFound):  # another replica took it
                await self.delete(sid, delete_trace=self._limits.delete_expired_traces)
                log.info("session %s: idle for more than %g s; deleted", sid, ttl)
                expired.append(sid)
        return expired
