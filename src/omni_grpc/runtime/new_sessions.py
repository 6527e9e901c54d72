"""A session comes into being: first in the index, then on disk, then live.

The index is asked first because it is where ``--max-sessions`` is decided,
atomically on every backend: a refused creation then leaves no file behind.
The session is ``created`` there (not listed, neither run nor deleted) while
its files are made; then it is live, at once for CreateSession, with its
claim for the Run that made it. A creation whose files fail, or a Run that
made a session and could not claim it, takes the session back out again.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace

from omni_grpc.runtime.backend import Backend
from omni_grpc.runtime.errors import BackendUnavailable, StorageUnavailable
from omni_grpc.runtime.limits import Limits
from omni_grpc.runtime.recorder import Recorder
from omni_grpc.runtime.session_index import SessionRecord
from omni_grpc.runtime.trace_store import TraceStore, utc_now
from omni_grpc.trace.paths import new_session_id
from omni_grpc.vocabulary import SessionLifecycle

# How long a session a refused Run made is asked out of an index that could
# not answer at once.
FORGET_WITHIN = 60.0


class NewSessions:
    def __init__(
        self, backend: Backend, traces: TraceStore, recorder: Recorder, limits: Limits
    ) -> None:
        self._backend = backend
        self._traces = traces
        self._recorder = recorder
        self._limits = limits
        # Removals of refused Runs' sessions still waiting for the index.
        self.pending: set[asyncio.Task[None]] = set()

    async def create(self, mode: str | None = None, *, with_trace: bool = False) -> SessionRecord:
        """A new session in the index, then its files (``TraceStore.create``).
        ``with_trace`` (CreateSession): live when this returns; else created,
        for the Run that made it to claim (``RunLease.claim(new=True)``)."""
        while True:
            session_id = new_session_id()
            now = utc_now()
            workspace = self._traces.workspaces_dir / session_id
            meta = self._recorder.meta_for(session_id, workspace)
            shard = self._traces.new_shard(session_id)
            record = SessionRecord(
                session_id,
                now,
                now,
                0,
                (shard,),
                meta,
                approval_mode=mode,
                lifecycle=SessionLifecycle.CREATED,
            )
            if await self._backend.index.add(record, limit=self._limits.max_sessions):
                break
        try:
            await asyncio.to_thread(self._traces.create, record, with_trace=with_trace)
        except OSError as exc:
            await self.forget(record)
            failure = self._recorder.storage_failed(exc)
            exhausted = failure.code == "resource_exhausted"
            raise StorageUnavailable(failure.message, exhausted=exhausted) from exc
        if with_trace:
            try:
                await self._backend.index.advance(
                    session_id, SessionLifecycle.CREATED, SessionLifecycle.LIVE
                )
            except BaseException:
                await self.forget(record)
                raise
            record = replace(record, lifecycle=SessionLifecycle.LIVE)
        return record

    async def save_mode(self, record: SessionRecord, mode: str) -> None:
        """Keeps a session's new approval mode on disk (``TraceStore.save_mode``)."""
        try:
            await asyncio.to_thread(self._traces.save_mode, record, mode)
        except OSError as exc:
            failure = self._recorder.storage_failed(exc)
            exhausted = failure.code == "resource_exhausted"
            raise StorageUnavailable(failure.message, exhausted=exhausted) from exc

    async def forget(self, record: SessionRecord) -> None:
        """Takes back a session no run used: out of the index, its files gone.
        An index that cannot answer now (Redis down, or its pool's wait run
        out under load) is asked again in the background, so the refusal
        leaves no session behind once it answers."""
        try:
            await self._backend.index.remove(record.session_id)
        except BackendUnavailable:
            task = asyncio.create_task(self._remove_later(record.session_id))
            self.pending.add(task)
            task.add_done_callback(self.pending.discard)
        except Exception:  # the refusal's own error is what the caller sees
            pass
        await asyncio.to_thread(self._traces.discard, record)

    async def _remove_later(self, session_id: str) -> None:
        deadline = time.monotonic() + FORGET_WITHIN
        delay = 0.1
        while time.monotonic() < deadline:
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)
            try:
                await self._backend.index.remove(session_id)
                return
            except BackendUnavailable:
                continue
