"""The trace store: each session's JSONL trace under ``<data-dir>/traces``.

Traces stay the reference JSONL on a file system every replica mounts (a
shared volume when there are several), laid out as the reference lays them
out. Only the holder of a session's run lease appends, so the store needs no
locking beyond the writer's one ``write(2)`` per record under its ``flock`` (appends run
on the recorder's threads, so the writers' cache is shared with them);
on a shared backend each append carries its record number (the journal's,
which the event log stores too), refused in that lock unless the trace holds
the records before it: a stale owner's late append, after another replica
closed its run, is refused by the file system's own lock. Engines get a
read-only ``SessionTrace`` view (``RunOptions.trace``), never a path to
derive things from.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import threading
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import orjson

from omni_grpc.convert import message_to_dict
from omni_grpc.engines.base import JsonObject
from omni_grpc.runtime.session_index import SessionRecord
from omni_grpc.trace import TraceWriter, read_jsonl
from omni_grpc.trace.index import read_window, shard_records
from omni_grpc.trace.paths import parse_shard_name, trace_path_for
from omni_grpc.trace.resume import read_trace, recover_shard
from omni_grpc.trace.window import Position, Window
from omni_grpc_proto.omni.v1 import omni_pb2

log = logging.getLogger(__name__)
_T = TypeVar("_T")

# Where a deleted session's kept trace and workspace go (never indexed).
DELETED_DIR = "deleted"
# A delete under way: ``<sid>.purge`` (its files are removed) or ``<sid>.keep``
# (moved under deleted/), written before any of its steps and removed after
# the last, so a delete whose replica died is finished where it stopped
# (``Retention.finish_marked``) instead of its session coming back.
DELETING_DIR = "deleting"
PURGE, KEEP = ".purge", ".keep"


# Shard writers kept at once (each holds its shard's tail state, no open file).
MAX_WRITERS = 256


def utc_now() -> str:
    return iso_utc(datetime.now(UTC))


def iso_utc(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class ShardedTrace:
    """One session's trace as an engine sees it: its recorded messages."""

    def __init__(self, shards: Sequence[Path]) -> None:
        self._shards = list(shards)

    @property
    def location(self) -> Path | None:
        """The shard appended to (for out-of-process engines that read it)."""
        return self._shards[-1] if self._shards else None

    def messages(self) -> list[JsonObject]:
        """Recorded messages in order; torn and malformed lines are skipped."""
        return list(self.iter_messages())

    def iter_messages(self, *, skip_last: int = 0) -> Iterator[JsonObject]:
        for message in all_but_last(self._records(), skip_last):
            as_dict = message_to_dict(message)
            del message  # not held beside its dict while the reader has that
            yield as_dict

    def _records(self) -> Iterator[omni_pb2.OmniMessage]:
        for shard in self._shards:
            if shard.is_file():
                for record in read_jsonl(shard, tolerant=True):
                    yield record.message


def all_but_last(items: Iterator[_T], count: int) -> Iterator[_T]:
    """``items`` without its last ``count``, holding no more than ``count``."""
    held: deque[_T] = deque()
    for item in items:
        held.append(item)
        if len(held) > count:
            yield held.popleft()


class TraceStore:
    def __init__(
        self,
        data_dir: Path,
        *,
        writer: Callable[[Path], TraceWriter] = TraceWriter,
        max_writers: int = MAX_WRITERS,
    ) -> None:
        self.data_dir = data_dir
        # Makes the writer of a shard (an observer may count what it writes).
        self._new_writer = writer
        self.traces_dir = data_dir / "traces"
        self.workspaces_dir = data_dir / "workspaces"
        # The writers of the shards written lately, least recently used first:
        # a bounded cache (a server sees sessions without end), and a writer
        # dropped re-reads its shard's tail on the next append, as after forget.
        self._writers: OrderedDict[Path, TraceWriter] = OrderedDict()
        self._max_writers = max_writers
        # Appends run on the recorder's threads: the cache is shared with them.
        self._writers_lock = threading.Lock()
        # Per last shard: the records of the shards before it.
        self._offsets: dict[Path, int] = {}

    def new_shard(self, session_id: str) -> str:
        """The first shard's name for a new session, relative to the data dir."""
        return trace_path_for(self.traces_dir, session_id).relative_to(self.data_dir).as_posix()

    def paths(self, record: SessionRecord) -> list[Path]:
        return [self.data_dir / shard for shard in record.shards]

    def workspace(self, session_id: str) -> Path:
        path = self.workspaces_dir / session_id
        path.mkdir(parents=True, exist_ok=True)
        return path

    def create(self, record: SessionRecord, *, with_trace: bool) -> None:
        """A new session's files, made once the index took it (a refused
        session leaves nothing on disk): its workspace and, ``with_trace``,
        its first shard, empty, so a restart indexes the session again even
        though no run recorded anything yet (the memory backend keeps no
        index of its own), with its own approval mode if it has one. Raises
        OSError when the disk refuses."""
        self.workspace(record.session_id)
        if with_trace:
            shard = self.paths(record)[0]
            shard.parent.mkdir(parents=True, exist_ok=True)
            shard.touch(exist_ok=True)
        if record.approval_mode is not None:
            self.save_mode(record, record.approval_mode)

    def save_mode(self, record: SessionRecord, mode: str) -> None:
        """The session's own approval mode, in a small file beside its first
        shard (``<shard>.mode``): the memory backend keeps no index across a
        restart, and a session in "ask" must not come back in the server's
        mode. It moves and goes with the shard (``remove``). Raises OSError
        when the disk refuses."""
        path = _mode_path(self.paths(record)[0])
        path.parent.mkdir(parents=True, exist_ok=True)
        staged = path.with_name(path.name + ".tmp")
        staged.write_text(mode)
        os.replace(staged, path)  # whole or not at all

    def discard(self, record: SessionRecord) -> None:
        """Undoes :meth:`create` for a session no run ever used: only what is
        still empty goes."""
        with contextlib.suppress(OSError):
            (self.workspaces_dir / record.session_id).rmdir()
        with contextlib.suppress(OSError):
            _mode_path(self.paths(record)[0]).unlink()
        for shard in self.paths(record):
            with contextlib.suppress(OSError):
                if shard.stat().st_size == 0:
                    shard.unlink()

    def view(self, record: SessionRecord) -> ShardedTrace:
        return ShardedTrace(self.paths(record))

    def append(
        self,
        record: SessionRecord,
        msg: omni_pb2.OmniMessage,
        data: bytes,
        *,
        number: int | None = None,
    ) -> bool:
        """Appends ``msg`` (serialized as ``data``) to the session's last shard;
        False when it is not recordable. Raises OSError when the disk refuses,
        ``StaleWriter`` when ``number`` (its record number in the session) does
        not follow the trace's last (another writer numbered past it)."""
        writer = self._writer(record)
        if number is not None:
            number -= self._offset(record)
        return writer.write(msg, data, number=number)

    def _offset(self, record: SessionRecord) -> int:
        """The records of the session's shards before its last (its record
        numbers run on across shards); counted once per shard appended to."""
        paths = self.paths(record)
        if len(paths) == 1:
            return 0
        with self._writers_lock:
            known = self._offsets.get(paths[-1])
        if known is None:
            known = sum(shard_records(p) for p in paths[:-1] if p.exists())
            with self._writers_lock:
                self._offsets[paths[-1]] = known
        return known

    def _writer(self, record: SessionRecord) -> TraceWriter:
        path = self.paths(record)[-1]
        with self._writers_lock:
            writer = self._writers.get(path)
            if writer is None:
                writer = self._writers[path] = self._new_writer(path)
                while len(self._writers) > self._max_writers:
                    self._writers.popitem(last=False)
            else:
                self._writers.move_to_end(path)
            return writer

    @property
    def cached_writers(self) -> int:
        return len(self._writers)

    def remove(self, record: SessionRecord, *, delete: bool) -> None:
        """A deleted session's files: removed with its workspace (``delete``), or
        moved under ``<data-dir>/deleted/`` in the same layout, where they stay
        readable but are never indexed again."""
        self.forget(record)
        workspace = self.workspaces_dir / record.session_id
        # Each shard with what lies beside it (its history index, a torn tail).
        files = [f for shard in self.paths(record) for f in shard.parent.glob(shard.name + "*")]
        if delete:
            for path in files:
                path.unlink(missing_ok=True)
            shutil.rmtree(workspace, ignore_errors=True)
            return
        kept = self.data_dir / DELETED_DIR
        for path in [*files, workspace]:
            if path.exists():
                target = kept / path.relative_to(self.data_dir)
                target.parent.mkdir(parents=True, exist_ok=True)
                os.replace(path, target)

    def mark_delete(self, session_id: str, *, delete: bool) -> None:
        """Writes the mark of a delete about to begin, durably (the file and
        its directory entry), before any of its steps. Raises OSError (a
        full or read-only disk): then the delete does not begin."""
        marks = self.data_dir / DELETING_DIR
        marks.mkdir(parents=True, exist_ok=True)
        path = marks / (session_id + (PURGE if delete else KEEP))
        with open(path, "wb") as f:
            os.fsync(f.fileno())
        directory = os.open(marks, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)

    def unmark_delete(self, session_id: str) -> None:
        """The delete is done (or undone): its mark goes."""
        for suffix in (PURGE, KEEP):
            (self.data_dir / DELETING_DIR / (session_id + suffix)).unlink(missing_ok=True)

    def marked_deletes(self) -> dict[str, bool]:
        """The deletes begun and not finished: session id -> whether its
        files are removed (a purge wins over a keep asked meanwhile)."""
        marks = self.data_dir / DELETING_DIR
        found: dict[str, bool] = {}
        if marks.is_dir():
            for path in marks.iterdir():
                if path.suffix in (PURGE, KEEP):
                    found[path.stem] = found.get(path.stem, False) or path.suffix == PURGE
        return found

    def forget(self, record: SessionRecord) -> None:
        """Drops cached writers: the next append re-reads the tail, which
        another replica may have extended since."""
        with self._writers_lock:
            for path in self.paths(record):
                self._writers.pop(path, None)

    async def read(self, record: SessionRecord) -> AsyncIterator[omni_pb2.OmniMessage]:
        for shard in self.paths(record):
            if shard.exists():
                for msg in await asyncio.to_thread(_read_shard, shard):
                    yield msg

    @staticmethod
    def read_shard(path: Path) -> list[omni_pb2.OmniMessage]:
        return _read_shard(path)

    def numbered(self, record: SessionRecord) -> list[tuple[int, Path]]:
        """The session's existing shards with their file index (``_001`` is 1)."""
        out = []
        for shard in self.paths(record):
            parsed = parse_shard_name(shard)
            if parsed is not None and shard.exists():
                out.append((parsed[1], shard))
        return out

    async def window(self, record: SessionRecord, limit: int, before: Position | None) -> Window:
        """The last ``limit`` units before ``before`` (``trace/window.py``),
        read through the shards' indexes: the cost of the window, not the trace."""
        return await asyncio.to_thread(read_window, self.numbered(record), limit, before)

    def recover(self, record: SessionRecord, *, close: bool = True) -> tuple[int, bool, bool]:
        """Closes what a crash left open in the newest shard: the record count,
        whether the repair (if one was needed) was written, and whether a run
        was found open. ``close``
        False: a torn tail is set aside, an open run is left open (it is
        resumed, ``runtime/resumption.py``)."""
        paths = self.paths(record)
        self.forget(record)
        shard = paths[-1]
        try:
            recovery = recover_shard(shard) if close else recover_shard(shard, closing=False)
        except OSError as exc:  # a read-only or full disk: serve what is there
            log.warning("cannot repair %s after a restart: %s", shard, exc)
            return record.message_count, False, False
        if recovery.torn_bytes:
            log.warning(
                "%s: moved a torn last line (%d bytes) to %s.torn",
                shard,
                recovery.torn_bytes,
                shard.name,
            )
        if recovery.closed and close:
            log.warning("%s: closed a run interrupted by the last shutdown", shard)
        count = sum(len(read_trace(p)[0]) for p in paths[:-1]) + recovery.record_count
        return count, True, bool(recovery.closed)

    def scan(self) -> list[SessionRecord]:
        """Every session with a trace under ``traces/``, oldest first."""
        shards: dict[str, list[tuple[int, Path]]] = {}
        if self.traces_dir.is_dir():
            for path in self.traces_dir.glob("*/*.jsonl"):
                parsed = parse_shard_name(path)
                if parsed is not None:
                    shards.setdefault(parsed[0], []).append((parsed[1], path))
        found = [
            self._describe(sid, [p for _, p in sorted(paths)]) for sid, paths in shards.items()
        ]
        return sorted(found, key=lambda s: (s.created_at, s.session_id))

    def _describe(self, session_id: str, shards: list[Path]) -> SessionRecord:
        first = shards[0]
        stat = first.stat()
        record = _first_record(first)
        stamp = record.get("timestamp")
        created = (
            stamp if isinstance(stamp, str) else iso_utc(datetime.fromtimestamp(stat.st_mtime, UTC))
        )
        updated = iso_utc(datetime.fromtimestamp(max(p.stat().st_mtime for p in shards), UTC))
        count = sum(len(read_trace(p)[0]) for p in shards)
        names = tuple(p.relative_to(self.data_dir).as_posix() for p in shards)
        payload = record.get("payload")
        meta = (
            payload if record.get("type") == "session_meta" and isinstance(payload, dict) else None
        )
        mode = _saved_mode(first)
        return SessionRecord(session_id, created, updated, count, names, meta, approval_mode=mode)


def _mode_path(first_shard: Path) -> Path:
    return first_shard.with_name(first_shard.name + ".mode")


def _saved_mode(first_shard: Path) -> str | None:
    try:
        return _mode_path(first_shard).read_text().strip() or None
    except FileNotFoundError:
        return None


def _read_shard(path: Path) -> list[omni_pb2.OmniMessage]:
    return [record.message for record in read_jsonl(path, tolerant=True)]


def _first_record(path: Path) -> dict[str, Any]:
    with path.open("rb") as fh:
        line = fh.readline()
    try:
        record = orjson.loads(line)
    except orjson.JSONDecodeError:
        return {}
    return record if isinstance(record, dict) else {}
