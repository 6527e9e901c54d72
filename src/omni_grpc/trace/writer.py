"""Append-only JSONL trace writer with the reference guarantees.

* One ``write(2)`` per record on an ``O_APPEND`` descriptor, so concurrent writers
  (threads or processes) never splice records into each other. The tail check and
  the write happen under an exclusive ``flock``: Linux grows a file's size page by
  page during a large write, so without it another writer could see a record half
  written, take it for a torn tail and add a needless blank line.
* A failed or short write is taken back (the file is cut to its size before
  the write, still under the lock), so a full disk does not tear the trace.
* A torn tail left by a crash is healed: before the first append to an existing
  file whose last byte is not ``\\n`` (and again after a failed write), the record
  is prefixed with ``\\n``. The torn line then becomes a malformed *middle* line,
  which tolerant readers skip and report instead of gluing it to a good record.
* Only recordable messages are written: no ``partial_*``, nothing with ``origin``.
* The shard's index (``trace/index.py``) is extended after each record, still
  under the lock, so a window never reads the whole trace. The index is a
  cache: a failure to update it never fails the record.
* A write may be numbered: ``write(..., number=n)`` is refused
  (``StaleWriter``, nothing written) unless the shard holds ``n - 1``
  records, counted under the same ``flock`` as the write (through the
  shard's index, or from the writer's own last write when nobody appended
  since). Record numbers are the trace's half of the journal (the event log
  stores the same number and refuses one that does not follow its last):
  a writer whose record another writer already numbered past (an owner
  paused past its lease, whose run another replica closed) adds nothing,
  wherever it was paused, even between its lease check and its write.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import struct
import threading
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from omni_grpc.protocol.guards import is_recordable
from omni_grpc.trace.index import IndexAppender, shard_records
from omni_grpc.trace.paths import parse_shard_name

if TYPE_CHECKING:
    from omni_grpc_proto.omni.v1.omni_pb2 import OmniMessage

log = logging.getLogger(__name__)


class StaleWriter(Exception):
    """A numbered write refused: the shard does not end on the record before
    it (another writer numbered past this writer's records)."""

    def __init__(self, path: Path, number: int, held: int) -> None:
        super().__init__(f"{path}: record {number} refused, the shard holds {held} records")
        self.number = number
        self.held = held


class TraceWriter:
    """Serialized appends to one trace shard. Safe to share between threads."""

    def __init__(self, path: str | Path, *, index: bool = True) -> None:
        self._path = Path(path)
        self._index: IndexAppender | None = IndexAppender(self._path) if index else None
        self._lock = threading.Lock()
        # None: the tail has not been looked at since construction or a failure.
        self._needs_newline: bool | None = None
        # (the shard's size, its records) after this writer's last write: the
        # count holds while the size does (nobody appended since).
        self._counted: tuple[int, int] | None = None

    @property
    def path(self) -> Path:
        return self._path

    def write(
        self, msg: OmniMessage, line: bytes | None = None, *, number: int | None = None
    ) -> bool:
        """Append ``msg`` if it is recordable; ``False`` (nothing written) otherwise.

        ``line`` is ``msg`` already serialized, for callers that have it;
        ``number`` its record number in the shard (``StaleWriter`` unless the
        shard holds ``number - 1`` records).
        """
        if not is_recordable(msg):
            return False
        if line is None:
            from omni_grpc.convert import serialize_message

            line = serialize_message(msg)
        self.append_line(line, msg, number=number)
        return True

    def append_line(
        self, record: bytes, msg: OmniMessage | None = None, *, number: int | None = None
    ) -> None:
        """Append one already-serialized JSON record (without its newline);
        ``msg`` is that record parsed, for callers that have it."""
        if b"\n" in record:
            raise ValueError("a trace record must be a single line")
        with self._lock:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self._path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                held = None
                if number is not None:
                    held = self._records(fd)
                    if number != held + 1:
                        raise StaleWriter(self._path, number, held)
                if self._needs_newline is None:
                    self._needs_newline = _tail_is_torn(fd)
                # Written as its parts in one call (O_APPEND: one append), not
                # joined: a record of tens of MiB is not copied once more.
                parts = (b"\n" if self._needs_newline else b"", record, b"\n")
                size = sum(len(part) for part in parts)
                # A failure (including a short write) leaves the tail unknown: look
                # again before the next append.
                self._needs_newline = None
                self._counted = None
                before = os.fstat(fd).st_size
                try:
                    written = os.writev(fd, parts)
                    if written != size:
                        raise OSError(
                            errno.ENOSPC,
                            f"short write to {self._path}: {written} of {size} bytes",
                        )
                except OSError:
                    # Take back what a short write left (a full disk), so the
                    # trace still ends on a record; if even that fails, the
                    # newline prefix above heals the tail on the next append.
                    with contextlib.suppress(OSError):
                        os.ftruncate(fd, before)
                    raise
                self._needs_newline = False
                if held is not None:
                    self._counted = (before + size, held + 1)
                if self._index is not None:
                    start = before + size - len(record) - 1
                    self._update_index(self._index, fd, before, start, record, msg)
            finally:
                os.close(fd)  # also releases the flock

    def _update_index(
        self,
        index: IndexAppender,
        fd: int,
        before: int,
        start: int,
        record: bytes,
        msg: OmniMessage | None,
    ) -> None:
        try:
            if msg is None:
                from omni_grpc.convert import parse_message

                msg = parse_message(record)
            index.appended(fd, before, start, start + len(record) + 1, record, msg)
        except (OSError, ValueError, struct.error) as exc:
            # The next reader catches the index up from the trace.
            log.debug("trace index of %s not updated: %s", self._path, exc)

    def _records(self, fd: int) -> int:
        """The shard's records, under its lock: known from this writer's last
        write while the shard kept its size, else counted through its index."""
        size = os.fstat(fd).st_size
        if self._counted is not None and self._counted[0] == size:
            return self._counted[1]
        return shard_records(self._path)

    def rotate(self) -> Path:
        """Move to the next shard (``_001`` -> ``_002``) in the same date directory."""
        parsed = parse_shard_name(self._path)
        if parsed is None:
            raise ValueError(f"{self._path.name} is not a <session>_<NNN>.jsonl shard")
        session_id, index = parsed
        if index >= 999:
            raise ValueError(f"{self._path.name} is the last possible shard")
        with self._lock:
            self._path = self._path.with_name(f"{session_id}_{index + 1:03d}.jsonl")
            self._needs_newline = None
            self._counted = None
            if self._index is not None:
                self._index = IndexAppender(self._path)
        return self._path

    def close(self) -> None:
        """Nothing stays open between records; present for ``with`` blocks."""

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _tail_is_torn(fd: int) -> bool:
    size = os.fstat(fd).st_size
    if size == 0:
        return False
    return os.pread(fd, 1, size - 1) != b"\n"
