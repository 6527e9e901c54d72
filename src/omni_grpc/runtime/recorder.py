"""The recorder: a run's trace appends, the index's count of them, and the
health of the trace storage.

Every record a run writes passes ``append``: the lease is checked first (a
fenced replica writes nothing), and on a shared backend its record number by
the trace's own lock (``TraceWriter``: refused unless the trace holds the
records before it), a record past the readers' line limit stops
the run instead of being silently lost, and a disk that refuses it marks the
storage unhealthy until a probe succeeds again.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

from omni_grpc import protocol
from omni_grpc.engines.base import DescribesSession, Engine, JsonObject
from omni_grpc.runtime import bodies
from omni_grpc.runtime.backend import Backend
from omni_grpc.runtime.errors import (
    BackendUnavailable,
    Fenced,
    RecordOutOfOrder,
    StorageUnavailable,
)
from omni_grpc.runtime.events import EventBody
from omni_grpc.runtime.health import STORAGE, HealthState, RunFailure, storage_failure
from omni_grpc.runtime.run import Run
from omni_grpc.runtime.session_index import SessionRecord
from omni_grpc.runtime.trace_store import TraceStore, utc_now
from omni_grpc.trace import StaleWriter
from omni_grpc.trace.lines import DEFAULT_MAX_LINE_BYTES
from omni_grpc_proto.omni.v1 import omni_pb2

log = logging.getLogger(__name__)

# Seconds between checks of a failing trace storage (health recovers on its own).
STORAGE_PROBE_SECONDS = 5.0
# The most often a running run's record count is written to the index
# (``count_soon``); its end writes the final count at once.
COUNT_EVERY = 0.5
# Trace appends of different runs written at once (each run writes one
# record at a time, in order).
WRITE_THREADS = 4


class TraceRejected(Exception):
    """The trace did not accept a record: the run must stop, unpublished."""

    def __init__(self, failure: RunFailure) -> None:
        super().__init__(failure.message)
        self.failure = failure


class Recorder:
    def __init__(
        self, engine: Engine, traces: TraceStore, backend: Backend, health: HealthState
    ) -> None:
        self.engine = engine
        self.traces = traces
        self.backend = backend
        self.health = health
        # The longest record the trace readers accept; longer ones stop the run.
        self.max_record_bytes = DEFAULT_MAX_LINE_BYTES
        # The sessions whose run's close the trace refused (its clients were
        # sent it, numbered as the trace will number it): recorded from the log
        # before the next run (``Recovery.close_unrecorded``), or at shutdown.
        self.unclosed: set[str] = set()
        self._probe: asyncio.Task[None] | None = None
        self._stopped = False
        # The threads trace appends run on (``append``), apart from the
        # default executor's reads so a slow disk's appends do not queue
        # history reads behind them, nor the other way round.
        self._writes = ThreadPoolExecutor(WRITE_THREADS, thread_name_prefix="omni-trace-append")

    # ---- a run's records ------------------------------------------------------

    def check_lease(self, run: Run) -> None:
        """Before a trace write: the lease must certainly still be ours. A
        lease merely past its local validity is refused without marking the
        run lost: it may still be ours, which the next renewal tells."""
        if run.lost or not run.lease.still_valid():
            raise Fenced(run.session_id, run.lease.token)

    async def append(self, run: Run, msg: omni_pb2.OmniMessage, data: bytes | None = None) -> bool:
        """Appends one record to the trace; False when it is not recordable.
        Raises TraceRejected when the disk refuses it, Fenced once the lease
        may have been lost.

        The write (its ``flock``, the record number's check, ``write(2)``, the
        index) runs on the recorder's threads, never on the event loop: a
        disk that stalls (fsync-heavy neighbours, a journal commit) stalls
        this run, not every client, health check and lease of the replica.
        The caller awaits each append before the next, so a run's records
        keep their order."""
        self.check_lease(run)
        line = data or bodies.message_body(msg).data
        if len(line) > self.max_record_bytes:
            # The trace readers (GetHistory, /messages) skip a line past their
            # limit: such a message would be published and then silently lost.
            raise TraceRejected(
                RunFailure(
                    "resource_exhausted",
                    f"a {arm(msg)} message of {len(line)} bytes is over the trace's "
                    f"record limit ({self.max_record_bytes} bytes); the run was stopped",
                )
            )
        # On a shared backend the file system checks the record's number, in
        # the append's own lock: a take-over between the check above and the
        # write (whose close numbered past this run's records) cannot let this
        # record in after its close.
        number = run.record.message_count + 1 if self.backend.shared else None
        writing = asyncio.get_running_loop().run_in_executor(
            self._writes,
            functools.partial(self.traces.append, run.record, msg, line, number=number),
        )
        try:
            written = await _uncancelled(writing)
        except StaleWriter as exc:
            run.lost = True
            raise RecordOutOfOrder(run.session_id, exc.number, exc.held) from exc
        except OSError as exc:
            raise TraceRejected(self.storage_failed(exc)) from exc
        if written:
            self.health.clear(STORAGE)
            run.record = replace(
                run.record, message_count=run.record.message_count + 1, updated_at=utc_now()
            )
        return written

    def numbered(self, run: Run, body: EventBody) -> EventBody:
        """``body`` with the record number the trace just gave it (the run's
        count, its appends awaited one at a time): the log refuses it unless
        it follows the log's last, so trace and log are one journal."""
        return replace(body, record=run.record.message_count)

    async def record(self, run: Run, msg: omni_pb2.OmniMessage, data: bytes | None = None) -> None:
        """Appends one record to the trace, then counts it in the index."""
        if await self.append(run, msg, data):
            await self.count(run)

    async def count(self, run: Run) -> None:
        """Writes the run's record count to the index now, after a write of
        ``count_soon`` on its way (so the newest count lands last), and ends
        the pending ones."""
        async with run.count_lock:
            counting, run.counting = run.counting, None
            run.count_dirty = False
            if counting is not None:
                # Holding the lock, it is pausing or waiting for the lock:
                # never cut off with its write half sent.
                counting.cancel()
            record = run.record
            await self.backend.index.recorded(
                run.session_id, record.message_count, record.updated_at
            )

    def count_soon(self, run: Run) -> None:
        """Counts in the background, the newest count only and at most once
        per ``COUNT_EVERY`` (the first at once): the index holds an absolute
        count, so a write skipped or lost is made good by the next, and the
        run's end writes the final count (``count``) before its idle is
        published. A count per record cost a Redis round trip per message."""
        run.count_dirty = True
        if run.counting is None:
            run.counting = asyncio.create_task(self._counter(run))

    async def _counter(self, run: Run) -> None:
        me = asyncio.current_task()
        try:
            while run.count_dirty:
                run.count_dirty = False
                async with run.count_lock:
                    if run.counting is not me:
                        return  # ``count`` took over
                    record = run.record
                    try:
                        await self.backend.index.recorded(
                            run.session_id, record.message_count, record.updated_at
                        )
                    except BackendUnavailable:
                        return  # the run's end counts again
                await asyncio.sleep(COUNT_EVERY)
        finally:
            if run.counting is me:
                run.counting = None

    # ---- the session_meta a trace opens with ------------------------------------

    def session_meta(self, record: SessionRecord) -> JsonObject:
        payload = record.meta
        if payload is None:
            payload = self.meta_for(record.session_id, self.traces.workspace(record.session_id))
        return protocol.session_meta(payload, timestamp=record.created_at)

    def meta_for(self, session_id: str, workspace: Path) -> JsonObject:
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

    # ---- the trace storage -----------------------------------------------------

    def storage_failed(self, exc: OSError) -> RunFailure:
        log.error("trace storage failed: %s", exc)
        failure = storage_failure(exc)
        self.health.report(STORAGE, failure.message)
        with contextlib.suppress(RuntimeError):  # RuntimeError: no running loop
            if self._probe is None or self._probe.done():
                self._probe = asyncio.get_running_loop().create_task(
                    self._probe_until_healthy(), name="omni-storage-probe"
                )
        return failure

    def check_storage(self) -> None:
        """Refuses a run up front while the storage is known to fail (and still
        fails a fresh check), instead of starting one that cannot be recorded."""
        problem = self.health.problem(STORAGE)
        if problem is None:
            return
        error = self.probe_storage()
        if error is None:
            self.health.clear(STORAGE)
            return
        full = storage_failure(error).code == "resource_exhausted"
        raise StorageUnavailable(problem, exhausted=full)

    def probe_storage(self) -> OSError | None:
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
        while self.health.problem(STORAGE) is not None and not self._stopped:
            await asyncio.sleep(STORAGE_PROBE_SECONDS)
            if await asyncio.to_thread(self.probe_storage) is None:
                self.health.clear(STORAGE)

    def stop(self) -> None:
        self._stopped = True
        if self._probe is not None:
            self._probe.cancel()

    def close(self) -> None:
        """After every run and close has ended: the append threads go (a
        write under way finishes)."""
        self._writes.shutdown(wait=False)


async def _uncancelled(writing: asyncio.Future[bool]) -> bool:
    """The append's outcome even when its run is cancelled meanwhile: the
    thread writes the record whatever happens, so the run counts it before
    the cancellation goes on (its count must match its trace)."""
    try:
        return await asyncio.shield(writing)
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):
            await writing
        raise


def arm(msg: omni_pb2.OmniMessage) -> str:
    return msg.WhichOneof("payload") or "unknown"
