"""The trace index: where a shard's units (tasks) start, so a window reads only the window.

Beside each shard ``<session>_<NNN>.jsonl`` lies ``<session>_<NNN>.jsonl.index``
(the trace readers glob ``*.jsonl``, so they never see it). It holds one
fixed-size entry per unit start (the record's ordinal and byte offset, a CRC
of its line, and the :class:`~omni_grpc.trace.window.PriorTotals` before it),
then a trailer: how many bytes of the shard it covers, the shard's size,
mtime and inode when it was written, the records and units counted, a CRC of
the last covered bytes, and the unit scan's state at the shard's start and at
the covered end. A window then costs a few ``pread`` calls on the index and
a parse of the window's own lines, whatever the trace's length.

The trace stays the source of truth; the index is a cache of it:

* :class:`~omni_grpc.trace.writer.TraceWriter` extends it after each record,
  under the shard's ``flock``, with one ``pwrite`` that lays the new entry (if
  the record starts a unit) and the new trailer over the old trailer. Entries
  below a trailer's count never change, so readers need no lock; a trailer
  read mid-write fails its CRC and is read again under a shared ``flock``.
* A reader trusts an index only when the shard's size, mtime and inode are
  the ones its trailer recorded. When the shard only grew (another writer,
  or a record whose entry is on its way) and its last covered bytes are
  unchanged, the reader indexes the new lines itself. Anything else (a
  missing, truncated or corrupted index, a shard edited, truncated or
  replaced, a shard whose starting state disagrees with the shard before it,
  a unit whose line no longer has its CRC) rebuilds the index from the
  shard. An index that cannot be written (a read-only data dir) is still
  computed, in memory, for that read.
* What it cannot see: a same-size rewrite inside one mtime tick of the last
  append, and an edit before the covered end combined with an append that
  leaves the last covered bytes as they were.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import struct
import threading
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from omni_grpc.trace.jsonl import LineParser, read_jsonl
from omni_grpc.trace.lines import DEFAULT_MAX_LINE_BYTES, RawLine, raw_line
from omni_grpc.trace.paths import parse_shard_name
from omni_grpc.trace.window import STATE_BYTES, Position, PriorTotals, UnitScan, Window

if TYPE_CHECKING:
    from omni_grpc_proto.omni.v1.omni_pb2 import OmniMessage

INDEX_SUFFIX = ".index"
_MAGIC = b"OMNIIX01"
# ordinal, line offset, line crc, prior turns, elapsed ms, session and context tokens, crc
_ENTRY = struct.Struct("<IQIqqqqI")
# magic, covered, size, mtime_ns, inode, records, units, tail crc, entry and end state, crc
_TRAILER = struct.Struct(f"<8sQQqQIII{STATE_BYTES}s{STATE_BYTES}sI")
ENTRY_BYTES = _ENTRY.size
TRAILER_BYTES = _TRAILER.size
# How many bytes before the covered end the trailer's tail CRC checks.
_TAIL = 64
_BLOCK = 256 * 1024
_INITIAL_STATE = UnitScan().pack()


class StaleIndex(Exception):
    """An index entry disagrees with the trace: rebuild and read again."""


def index_path(shard: Path) -> Path:
    return shard.with_name(shard.name + INDEX_SUFFIX)


@dataclass(frozen=True, slots=True)
class Unit:
    ordinal: int  # the record's place among the shard's parsed records
    offset: int  # the byte where its line starts
    line_crc: int  # crc32 of the line, without its newline
    prior: PriorTotals

    def pack(self) -> bytes:
        p = self.prior
        head = _ENTRY.pack(
            self.ordinal,
            self.offset,
            self.line_crc,
            p.turns,
            p.elapsed_ms,
            p.session_tokens,
            p.context_tokens,
            0,
        )
        return head[:-4] + struct.pack("<I", zlib.crc32(head[:-4]))

    @classmethod
    def unpack(cls, data: bytes) -> Unit:
        ordinal, offset, line_crc, turns, elapsed, session, context, crc = _ENTRY.unpack(data)
        if zlib.crc32(data[:-4]) != crc:
            raise StaleIndex("an index entry fails its CRC")
        return cls(ordinal, offset, line_crc, PriorTotals(turns, 0, elapsed, session, context))


@dataclass(frozen=True, slots=True)
class Trailer:
    covered: int  # shard bytes indexed: they end on a newline (or at 0)
    size: int  # the shard's size, mtime and inode when this was written
    mtime_ns: int
    inode: int
    records: int  # parsed records in the covered bytes
    units: int  # entries before the trailer
    tail_crc: int  # crc32 of the up to 64 bytes before ``covered``
    entry_state: bytes  # UnitScan.pack() before the shard's first record
    end_state: bytes  # ... after its last covered record

    def pack(self) -> bytes:
        head = _TRAILER.pack(
            _MAGIC,
            self.covered,
            self.size,
            self.mtime_ns,
            self.inode,
            self.records,
            self.units,
            self.tail_crc,
            self.entry_state,
            self.end_state,
            0,
        )
        return head[:-4] + struct.pack("<I", zlib.crc32(head[:-4]))

    @classmethod
    def unpack(cls, data: bytes) -> Trailer | None:
        if len(data) != TRAILER_BYTES or zlib.crc32(data[:-4]) != int.from_bytes(
            data[-4:], "little"
        ):
            return None
        magic, covered, size, mtime, inode, records, units, tail, entry, end, _ = _TRAILER.unpack(
            data
        )
        if magic != _MAGIC:
            return None
        return cls(covered, size, mtime, inode, records, units, tail, entry, end)


def _read_trailer(fd: int, *, locked: bool = False) -> Trailer | None:
    """The trailer of an open index, None when there is none or it is damaged.
    A torn read (a writer's ``pwrite`` in flight) is retried under a shared
    lock, unless the caller holds the exclusive one (then it is damage)."""
    for attempt in range(1 if locked else 2):
        if attempt:
            fcntl.flock(fd, fcntl.LOCK_SH)
        try:
            size = os.fstat(fd).st_size
            if size < TRAILER_BYTES or (size - TRAILER_BYTES) % ENTRY_BYTES:
                trailer = None
            else:
                trailer = Trailer.unpack(os.pread(fd, TRAILER_BYTES, size - TRAILER_BYTES))
                if trailer is not None and size != trailer.units * ENTRY_BYTES + TRAILER_BYTES:
                    trailer = None
        finally:
            if attempt:
                fcntl.flock(fd, fcntl.LOCK_UN)
        if trailer is not None:
            return trailer
    return None


def _tail_crc(fd: int, end: int) -> int:
    n = min(_TAIL, end)
    return zlib.crc32(os.pread(fd, n, end - n)) if n else 0


# ---- lines with their byte offsets ---------------------------------------------


@dataclass(frozen=True, slots=True)
class _Line:
    start: int
    end: int  # after the newline (or the end of the data when unterminated)
    data: bytes | None  # without the newline; None when over the line limit
    terminated: bool


def _lines(fd: int, start: int, end: int, max_line_bytes: int) -> Iterator[_Line]:
    """The lines of ``fd`` between two offsets, read in blocks; a line over the
    limit is passed over without being held."""
    pos, line_start = start, start
    parts: list[bytes] = []
    held, oversized = 0, False
    while pos < end:
        chunk = os.pread(fd, min(_BLOCK, end - pos), pos)
        if not chunk:
            break  # the file shrank under us: what is left is unterminated
        pieces = chunk.split(b"\n")
        at = pos
        pos += len(chunk)
        for piece in pieces[:-1]:
            at += len(piece) + 1
            if oversized or held + len(piece) > max_line_bytes:
                data = None
            else:
                data = b"".join([*parts, piece]) if parts else piece
            yield _Line(line_start, at, data, True)
            line_start, parts, held, oversized = at, [], 0, False
        rest = pieces[-1]
        if rest and not oversized:
            held += len(rest)
            if held > max_line_bytes:
                parts, oversized = [], True
            else:
                parts.append(rest)
    if pos > line_start:
        yield _Line(line_start, pos, None if oversized else b"".join(parts), False)


def _raw(line: _Line, max_line_bytes: int) -> RawLine | None:
    if line.data is None:
        return RawLine(0, b"", oversized=True, terminated=line.terminated)
    return raw_line(0, line.data, line.terminated, max_line_bytes)


# ---- one shard's view -------------------------------------------------------------


@dataclass
class _Scanned:
    """What a pass over part of a shard found."""

    units: list[Unit] = field(default_factory=list)
    records: int = 0
    covered: int = 0
    state: bytes = _INITIAL_STATE
    # Through the unterminated last line too, if there is one.
    all_units: list[Unit] = field(default_factory=list)
    all_records: int = 0
    all_state: bytes = _INITIAL_STATE


def _scan(fd: int, start: int, end: int, records: int, state: bytes) -> _Scanned:
    scan = UnitScan.unpack(state)
    parser = LineParser(tolerant=True, on_skip=None, max_line_bytes=DEFAULT_MAX_LINE_BYTES)
    units: list[Unit] = []
    covered: tuple[int, int, int, bytes] | None = None  # end, records, units, state
    for line in _lines(fd, start, end, DEFAULT_MAX_LINE_BYTES):
        if not line.terminated:  # the last line, torn or in flight: not covered
            covered = (line.start, records, len(units), scan.pack())
        raw = _raw(line, DEFAULT_MAX_LINE_BYTES)
        msg = parser.parse(raw) if raw is not None else None
        if msg is not None:
            if scan.feed(msg):
                assert line.data is not None
                units.append(Unit(records, line.start, zlib.crc32(line.data), scan.unit_prior))
            records += 1
        if line.terminated:
            start = line.end
    end_state = scan.pack()
    if covered is None:
        covered = (start, records, len(units), end_state)
    at, counted, indexed, covered_state = covered
    return _Scanned(
        units=units[:indexed],
        records=counted,
        covered=at,
        state=covered_state,
        all_units=units,
        all_records=records,
        all_state=end_state,
    )


class ShardView:
    """One shard as its index sees it, for the length of one read."""

    def __init__(
        self,
        file_index: int,
        shard_fd: int,
        size: int,
        index_fd: int | None,
        persisted: int,
        extra: list[Unit],
        records: int,
        end_state: bytes,
    ) -> None:
        self.file_index = file_index
        self.fd = shard_fd
        self.size = size  # the bytes this view reads: later appends are not in it
        self._index_fd = index_fd
        self._persisted = persisted  # entries read from the index file
        self._extra = extra  # entries after those, found by this read
        self.records = records
        self.end_state = end_state

    @property
    def units(self) -> int:
        return self._persisted + len(self._extra)

    def unit(self, k: int) -> Unit:
        if k >= self._persisted:
            return self._extra[k - self._persisted]
        assert self._index_fd is not None
        return Unit.unpack(os.pread(self._index_fd, ENTRY_BYTES, k * ENTRY_BYTES))

    def units_before(self, ordinal: int) -> int:
        """How many units start before ``ordinal`` (a binary search)."""
        lo, hi = 0, self.units
        while lo < hi:
            mid = (lo + hi) // 2
            if self.unit(mid).ordinal < ordinal:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def records_from(
        self, offset: int, ordinal: int, stop: int | None, line_crc: int | None
    ) -> Iterator[tuple[Position, OmniMessage]]:
        """The records from the line at ``offset`` (record ``ordinal``) up to
        ordinal ``stop`` (the end when None). ``line_crc``: what that first
        line must hash to."""
        parser = LineParser(tolerant=True, on_skip=None, max_line_bytes=DEFAULT_MAX_LINE_BYTES)
        for line in _lines(self.fd, offset, self.size, DEFAULT_MAX_LINE_BYTES):
            if line_crc is not None:
                if line.data is None or zlib.crc32(line.data) != line_crc:
                    raise StaleIndex(f"shard {self.file_index}: no unit at byte {offset}")
                line_crc = None
            if stop is not None and ordinal >= stop:
                return
            raw = _raw(line, DEFAULT_MAX_LINE_BYTES)
            msg = parser.parse(raw) if raw is not None else None
            if msg is not None:
                yield (self.file_index, ordinal), msg
                ordinal += 1

    def close(self) -> None:
        os.close(self.fd)
        if self._index_fd is not None:
            os.close(self._index_fd)


def open_view(shard: Path, file_index: int, entry_state: bytes, *, rebuild: bool) -> ShardView:
    """The shard's view, from its index when the index holds, else from a
    rebuilt one (written back when it can be)."""
    fd = os.open(shard, os.O_RDONLY)
    try:
        st = os.fstat(fd)
        index_fd: int | None = None
        with contextlib.suppress(FileNotFoundError):
            index_fd = os.open(index_path(shard), os.O_RDONLY)
        trailer = _read_trailer(index_fd) if index_fd is not None and not rebuild else None
        if (
            trailer is not None
            and trailer.entry_state == entry_state
            and trailer.inode == st.st_ino
        ):
            same = trailer.size == st.st_size and trailer.mtime_ns == st.st_mtime_ns
            grew_only = (
                trailer.size != st.st_size
                and trailer.covered <= st.st_size
                and _tail_crc(fd, trailer.covered) == trailer.tail_crc
            )
            if (same and trailer.covered <= st.st_size) or grew_only:
                scanned = _scan(fd, trailer.covered, st.st_size, trailer.records, trailer.end_state)
                if grew_only and scanned.covered > trailer.covered:
                    _extend(shard, trailer, scanned, st)
                return ShardView(
                    file_index,
                    fd,
                    st.st_size,
                    index_fd,
                    trailer.units,
                    scanned.all_units,
                    scanned.all_records,
                    scanned.all_state,
                )
        if index_fd is not None:
            os.close(index_fd)
        scanned = _scan(fd, 0, st.st_size, 0, entry_state)
        _replace(shard, entry_state, scanned, st)
        return ShardView(
            file_index,
            fd,
            st.st_size,
            None,
            0,
            scanned.all_units,
            scanned.all_records,
            scanned.all_state,
        )
    except BaseException:
        os.close(fd)
        raise


def _trailer_for(
    scanned: _Scanned, st: os.stat_result, units: int, tail_crc: int, entry_state: bytes
) -> Trailer:
    return Trailer(
        scanned.covered,
        st.st_size,
        st.st_mtime_ns,
        st.st_ino,
        scanned.records,
        units,
        tail_crc,
        entry_state,
        scanned.state,
    )


def _extend(shard: Path, old: Trailer, scanned: _Scanned, st: os.stat_result) -> None:
    """Writes what a reader indexed past an index's end, if nobody moved it meanwhile."""
    with contextlib.suppress(OSError), _locked_index(shard, create=False) as fd:
        if fd is None or _read_trailer(fd, locked=True) != old:
            return
        with open(shard, "rb") as fh:
            tail = _tail_crc(fh.fileno(), scanned.covered)
        new = _trailer_for(scanned, st, old.units + len(scanned.units), tail, old.entry_state)
        data = b"".join(u.pack() for u in scanned.units) + new.pack()
        os.pwrite(fd, data, old.units * ENTRY_BYTES)


def _replace(shard: Path, entry_state: bytes, scanned: _Scanned, st: os.stat_result) -> None:
    """Writes a rebuilt index beside the shard (a new file renamed into place,
    so a reader of the old one reads on undisturbed)."""
    target = index_path(shard)
    # Per thread: two reads rebuilding at once must not share a half-written file.
    temp = target.with_name(f".{target.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    with contextlib.suppress(OSError):
        with open(shard, "rb") as fh:
            tail = _tail_crc(fh.fileno(), scanned.covered)
        trailer = _trailer_for(scanned, st, len(scanned.units), tail, entry_state)
        try:
            with open(temp, "wb") as out:
                for unit in scanned.units:
                    out.write(unit.pack())
                out.write(trailer.pack())
            os.replace(temp, target)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp)


@contextlib.contextmanager
def _locked_index(shard: Path, *, create: bool) -> Iterator[int | None]:
    """The shard's index file open and exclusively locked (the file now at the
    path: one renamed into place while we waited is opened again)."""
    path = index_path(shard)
    for _ in range(5):
        try:
            fd = os.open(path, os.O_RDWR | (os.O_CREAT if create else 0), 0o644)
        except FileNotFoundError:
            yield None
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                current = os.stat(path).st_ino
            except FileNotFoundError:
                current = -1
            if current == os.fstat(fd).st_ino:
                yield fd
                return
        finally:
            os.close(fd)
    raise OSError(errno.EAGAIN, f"{path} keeps being replaced")


# ---- the writer's side ---------------------------------------------------------


class IndexAppender:
    """The writer's side of one shard's index: extends it after each record.

    It keeps the trailer it wrote last and the scan after it, so a record
    whose index nobody else touched costs a lock, a ``pread`` of the trailer
    and one ``pwrite``."""

    def __init__(self, shard: Path) -> None:
        self.shard = shard
        self._path = os.fspath(index_path(shard))
        self._last: tuple[bytes, Trailer, UnitScan] | None = None

    def appended(
        self,
        shard_fd: int,
        before: int,
        line_start: int,
        after: int,
        record: bytes,
        msg: OmniMessage,
    ) -> None:
        """Called under the shard's lock after ``record`` went to bytes
        ``line_start``..``after`` (the shard was ``before`` bytes long).
        Extends the index when it ended exactly where the shard did;
        otherwise it lags, and the next reader catches it up."""
        # Only a shard's first record starts an index; later ones extend one.
        entry_state = _entry_state(self.shard) if before == 0 else None
        flags = os.O_RDWR | (os.O_CREAT if entry_state is not None else 0)
        try:
            fd = os.open(self._path, flags, 0o644)
        except FileNotFoundError:
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            st = os.fstat(fd)
            if os.stat(self._path).st_ino != st.st_ino:
                return  # a reader renamed a rebuilt one into place: it lags
            if st.st_size == 0:
                if entry_state is None:
                    return
                old = Trailer(0, 0, 0, 0, 0, 0, 0, entry_state, entry_state)
                scan = UnitScan.unpack(entry_state)
            elif (
                self._last is not None
                and os.pread(fd, TRAILER_BYTES, st.st_size - TRAILER_BYTES) == self._last[0]
            ):
                _, old, scan = self._last
            else:
                trailer = _read_trailer(fd, locked=True)
                if trailer is None:
                    return
                old, scan = trailer, UnitScan.unpack(trailer.end_state)
            self._last = None
            if old.covered != before:
                return
            entry = b""
            if scan.feed(msg):
                entry = Unit(old.records, line_start, zlib.crc32(record), scan.unit_prior).pack()
            # The last _TAIL bytes written (the record's end and its newline),
            # without joining a copy of a record that may be megabytes.
            tail = (
                zlib.crc32(b"\n", zlib.crc32(memoryview(record)[1 - _TAIL :]))
                if len(record) + 1 >= _TAIL
                else _tail_crc(shard_fd, after)
            )
            shard_st = os.fstat(shard_fd)
            new = Trailer(
                after,
                shard_st.st_size,
                shard_st.st_mtime_ns,
                shard_st.st_ino,
                old.records + 1,
                old.units + (1 if entry else 0),
                tail,
                old.entry_state,
                scan.pack(),
            )
            packed = new.pack()
            os.pwrite(fd, entry + packed, old.units * ENTRY_BYTES)
            self._last = (packed, new, scan)
        finally:
            os.close(fd)  # also releases the flock


def _entry_state(shard: Path) -> bytes | None:
    """The scan state a new shard starts from: the end of the session's
    previous shard, when its index covers all of it."""
    parsed = parse_shard_name(shard)
    if parsed is None:
        return None
    session_id, number = parsed
    for earlier in range(number - 1, 0, -1):
        prev = shard.with_name(f"{session_id}_{earlier:03d}.jsonl")
        try:
            st = prev.stat()
            with open(index_path(prev), "rb") as fh:
                trailer = _read_trailer(fh.fileno())
        except FileNotFoundError:
            continue
        except OSError:
            return None
        if trailer is None or trailer.covered != st.st_size:
            return None
        fresh = (trailer.size, trailer.mtime_ns, trailer.inode) == (
            st.st_size,
            st.st_mtime_ns,
            st.st_ino,
        )
        return trailer.end_state if fresh else None
    return _INITIAL_STATE


def shard_records(shard: Path) -> int:
    """How many records the shard holds (the writer's count of its record
    numbers), read through its index: the index's count, caught up from the
    shard past what it covers. A shard whose start state cannot be told (the
    index of the shard before it is stale) is counted from its lines."""
    state = _entry_state(shard)
    if state is None:
        return sum(1 for _ in read_jsonl(shard, tolerant=True))
    try:
        view = open_view(shard, 0, state, rebuild=False)
    except FileNotFoundError:
        return 0
    try:
        return view.records
    finally:
        view.close()


# ---- windows --------------------------------------------------------------------


def read_window(shards: Sequence[tuple[int, Path]], limit: int, before: Position | None) -> Window:
    """:func:`omni_grpc.trace.window.window` over the session's shards (by
    file index, existing ones), reading the index and the window's lines only."""
    try:
        return _window(shards, limit, before, rebuild=False)
    except StaleIndex:
        return _window(shards, limit, before, rebuild=True)


def open_views(shards: Sequence[tuple[int, Path]], *, rebuild: bool) -> list[ShardView]:
    views: list[ShardView] = []
    state = _INITIAL_STATE
    try:
        for file_index, path in shards:
            try:
                view = open_view(path, file_index, state, rebuild=rebuild)
            except FileNotFoundError:
                continue  # gone since it was listed: as if never there
            views.append(view)
            state = view.end_state
    except BaseException:
        for view in views:
            view.close()
        raise
    return views


def _window(
    shards: Sequence[tuple[int, Path]], limit: int, before: Position | None, *, rebuild: bool
) -> Window:
    views = open_views(shards, rebuild=rebuild)
    try:
        if not views:
            return Window([], None, PriorTotals())
        if before is None:
            end_view, end_ordinal = len(views) - 1, None
            count = sum(v.units for v in views)
        else:
            found = [i for i, v in enumerate(views) if v.file_index == before[0] and v.records]
            if not found:
                return Window([], None, PriorTotals())
            end_view = found[0]
            end_ordinal = min(before[1], views[end_view].records)
            count = sum(v.units for v in views[:end_view])
            count += views[end_view].units_before(before[1])
        if count <= limit:
            start_view, offset, ordinal, crc = 0, 0, 0, None
            first: Position | None = None
            prior = PriorTotals()
        else:
            k = count - limit
            start_view = 0
            while k >= views[start_view].units:
                k -= views[start_view].units
                start_view += 1
            unit = views[start_view].unit(k)
            offset, ordinal, crc = unit.offset, unit.ordinal, unit.line_crc
            first, prior = (views[start_view].file_index, unit.ordinal), unit.prior
        messages: list[tuple[Position, OmniMessage]] = []
        for i in range(start_view, end_view + 1):
            view = views[i]
            stop = end_ordinal if i == end_view else None
            if i == start_view:
                messages.extend(view.records_from(offset, ordinal, stop, crc))
            else:
                messages.extend(view.records_from(0, 0, stop, None))
        return Window(messages, first, prior)
    finally:
        for view in views:
            view.close()
