"""The event log on Redis Streams: replay and live from the same stream.

Each replica reads a session's stream once, while it has local subscribers
of it (one blocking ``XREAD`` per replica over every such stream:
``stream_reader.py``), and hands each event to its fan-out
(``runtime/fanout.py``), which serves this replica's subscribers as it serves
the memory log's. There is no pub/sub side channel: a subscriber registers
locally first, then one script returns its replayed gap and takes the seqs of
its initial events, and it goes live from there, dropping what the replay
already covered.

A replica's own writes go to its subscribers from the write path, not read
back: the publish script returns the kept seq each batch follows on from, and
a batch that follows on from the last event handed out here (nothing another
replica wrote came between) is handed out as its reply arrives; the reader
passes over those entries when it reads them. Any other batch waits for the
reader, which hands out the stream in its order, so the order, the
contiguity checks and the subscribe merge are the stream's whichever path an
event took, and a batch the script refused (fenced) is handed to no one.

Back-pressure holds a writer in this process: the events it has written and
the reader has not yet handed out count against every local subscriber's
share of the window, so a reader that keeps up is not cut off by a burst still
on its way. A writer on another replica does not wait for this replica's
readers: one that falls more than a window behind is cut off with
``resync_required`` (its backlog is larger than the window), and one the
stream was trimmed past between two reads is told so too (the entry read next
does not name the last one delivered).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import secrets
import struct
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from redis.exceptions import NoScriptError, ResponseError

from omni_grpc.runtime import bodies
from omni_grpc.runtime.errors import BackendUnavailable, Fenced, RecordOutOfOrder
from omni_grpc.runtime.event_log import (
    InitialEvents,
    LogRegistry,
    ReplayWindow,
    initial_bodies,
)
from omni_grpc.runtime.events import EventBody, HubEvent, format_event_id, parse_event_id
from omni_grpc.runtime.fanout import DEFAULT_STALL_TIMEOUT, Fanout, Subscriber
from omni_grpc.runtime.health import RunFailure
from omni_grpc.runtime.redis import large_bodies, scripts
from omni_grpc.runtime.redis.connection import (
    RedisConnection,
    one_per_connection,
    unavailable_on_failure,
)
from omni_grpc.runtime.redis.stream_reader import streams_of
from omni_grpc.vocabulary import AbortKind

log = logging.getLogger(__name__)


# A flush sends at most this many events / bytes of JSON in one script call.
_BATCH_EVENTS = 500
_BATCH_BYTES = 1 << 20
# Writes queued before the writer is told to wait (congested).
_MAX_QUEUED = 1000


@dataclass
class _Pending:
    body: EventBody
    fence: int | None
    end_run: bool
    future: asyncio.Future[HubEvent]


# A batch's and its events' small fields as the publish script unpacks them
# (scripts.PUBLISH_HEAD and PUBLISH_EVENT): the log's own (window, epoch
# candidate, ttl, session id) once, then the token, end_run and the count,
# then each event's kind, bumps the state version, size, failure code,
# failure message and abort kind, each of the last three after its length.
_STATIC = struct.Struct(">IQH")
_TTL = struct.Struct(">QH")
_TAIL = struct.Struct(">BI")
_HEAD = struct.Struct(">cBIH")
_PLAIN = struct.Struct(">cBIHIH")
_LEN4 = struct.Struct(">I")
_LEN2 = struct.Struct(">H")


def _header(body: EventBody, outside: bool = False) -> bytes:
    kind = b"m" if body.is_message else b"s"
    if outside:  # its text is in the bodies hash (large_bodies.py)
        kind = kind.upper()
    bumps = 1 if _bumps_state(body) else 0
    failure, abort_kind = body.failure, body.abort_kind
    number = _LEN4.pack(body.record or 0)
    if failure is None and not abort_kind:
        return _PLAIN.pack(kind, bumps, body.size, 0, 0, 0) + number
    code = failure.code.encode() if failure else b""
    message = failure.message.encode() if failure else b""
    kind_of_abort = abort_kind.encode() if abort_kind else b""
    return b"".join((
        _HEAD.pack(kind, bumps, body.size, len(code)), code,
        _LEN4.pack(len(message)), message,
        _LEN2.pack(len(kind_of_abort)), kind_of_abort, number,
    ))  # fmt: skip


def _bumps_state(body: EventBody) -> bool:
    """Events after which a new subscriber's initial events may differ."""
    if not body.is_message:
        return True
    return body.payload_arm == "approval_decision"


def encode_proto(body: EventBody) -> bytes:
    """The body's wire bytes: encoded with its text when it was made."""
    if body.wire is not None:
        return body.wire
    proto = body.decoded_message if body.is_message else body.decoded_server_event
    assert proto is not None
    return proto.SerializeToString()


def decode_entry(epoch: str, entry_id: bytes, fields: dict[bytes, bytes]) -> HubEvent:
    """An event as stored: the JSON text every transport sends, and beside it
    the protobuf, which gRPC sends as it is; the message is decoded from it
    (exact, and several times faster than the JSON) only if something reads
    it, once per event (``HubEvent.message``)."""
    seq = int(entry_id.split(b"-", 1)[0])
    data = fields[b"d"]
    failure = None
    if b"fc" in fields:
        failure = RunFailure(fields[b"fc"].decode(), fields[b"fm"].decode())
    kind = AbortKind(fields[b"ak"].decode()) if b"ak" in fields else None
    encoded: Literal["message", "server_event"] = (
        "message" if fields.get(b"k") == b"m" else "server_event"
    )
    size = fields.get(b"n")
    # No protobuf for a large body (large_bodies.py): decoded from the text.
    wire = fields.get(b"p")
    number = fields.get(b"r")  # absent: not a record, or written by 0.3
    body = EventBody(
        None,
        None,
        data,
        failure,
        kind,
        encoded,
        wire,
        -1 if size is None else int(size),
        record=int(number) if number else None,
    )
    prev = fields.get(b"pv")
    return HubEvent(seq, format_event_id(epoch, seq), body, True, int(prev) if prev else None)


def _pairs(raw: Any) -> dict[bytes, bytes]:
    if isinstance(raw, dict):
        return raw
    return {raw[i]: raw[i + 1] for i in range(0, len(raw), 2)}


# A batch larger than this is sent on its own, not in the shared pipeline:
# the other logs' writes would wait behind its transfer.
_SHARED_BYTES = 1 << 20


class _Appender:
    """One pipeline per round for the pending batch of every log on this
    replica. A batch alone costs a round trip through the pool (about four
    times the replica's CPU of a command sent in a pipeline of ten), and in a
    paced run most batches are one or two events; sessions written at the same
    time share the round trip, and Redis syncs its AOF once for all of them.
    Each log waits for its batch's reply before it sends the next, so a
    session's batches stay in order; a reply is the batch's own, error or
    not. Redis that lost its scripts (a restart) has the script loaded again
    and those calls sent once more."""

    def __init__(self, conn: RedisConnection) -> None:
        self._conn = conn
        self._sha = conn.commands.register_script(scripts.PUBLISH).sha
        self._waiting: list[tuple[list[bytes], list[bytes], asyncio.Future[Any]]] = []
        self._task: asyncio.Task[None] | None = None

    async def call(self, keys: list[bytes], args: list[bytes]) -> Any:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting.append((keys, args, future))
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="omni-redis-appends")
        return await future

    async def _run(self) -> None:
        try:
            while self._waiting:
                calls, self._waiting = self._waiting, []
                try:
                    replies = await self._send(calls)
                except BaseException as exc:
                    for *_, future in calls:
                        if not future.done():
                            future.set_exception(exc)
                    if isinstance(exc, asyncio.CancelledError):
                        raise
                    continue
                for (*_, future), reply in zip(calls, replies, strict=True):
                    if future.done():
                        continue
                    if isinstance(reply, BaseException):
                        future.set_exception(reply)
                    else:
                        future.set_result(reply)
        finally:
            self._task = None
            for *_, future in self._waiting:
                future.cancel()
            self._waiting = []

    async def _send(self, calls: list[tuple[list[bytes], list[bytes], Any]]) -> list[Any]:
        replies = await self._pipeline(calls)
        lost = [i for i, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
        if lost:
            await self._conn.commands.script_load(scripts.PUBLISH)
            again = await self._pipeline([calls[i] for i in lost])
            for i, reply in zip(lost, again, strict=True):
                replies[i] = reply
        return replies

    async def _pipeline(self, calls: list[tuple[list[bytes], list[bytes], Any]]) -> list[Any]:
        pipe = self._conn.commands.pipeline(transaction=False)
        for keys, args, _ in calls:
            pipe.evalsha(self._sha, len(keys), *keys, *args)
        replies: list[Any] = await pipe.execute(raise_on_error=False)
        return replies

    async def close(self) -> None:
        task = self._task
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


_appender_of = one_per_connection(_Appender)


class RedisEventLog:
    """One session's stream, as this replica sees it."""

    def __init__(
        self,
        conn: RedisConnection,
        session_id: str,
        window: ReplayWindow,
        *,
        idle_ttl: float,
        epoch: str | None = None,
        stall_timeout: float = DEFAULT_STALL_TIMEOUT,
    ) -> None:
        self._conn = conn
        self.session_id = session_id
        self._window = window
        self._ttl_ms = str(max(1, int(idle_ttl * 1000)))
        self._candidate = epoch or secrets.token_hex(4)
        self._epoch: str | None = None
        k = conn.session_key
        self._events, self._meta = k(session_id, "events"), k(session_id, "meta")
        self._fence, self._lease = k(session_id, "fence"), k(session_id, "lease")
        self._run = k(session_id, "run")
        self._bodies = large_bodies.LargeBodies(conn, k(session_id, "bodies"))
        # Large bodies this process wrote, by reference, until the reader here
        # hands their entries out: it need not read them back from Redis.
        self._staged: dict[bytes, tuple[int, EventBody]] = {}
        self._runs = conn.global_key("runs")
        # What every publish sends alike, encoded once.
        self._publish_keys = [
            key.encode()
            for key in (
                self._events, self._meta, self._fence, self._lease, self._run, self._runs,
                self._bodies.key,
            )
        ]  # fmt: skip
        candidate, sid = self._candidate.encode(), session_id.encode()
        self._static = b"".join((
            _STATIC.pack(window.max_events, window.max_bytes, len(candidate)), candidate,
            _TTL.pack(int(self._ttl_ms), len(sid)), sid,
        ))  # fmt: skip
        r = conn.commands
        self._publish_script = r.register_script(scripts.PUBLISH)
        self._appender = _appender_of(conn)
        self._subscribe_script = r.register_script(scripts.SUBSCRIBE)
        self._replay_script = conn.reads.register_script(scripts.REPLAY)
        self._fanout = Fanout(
            window.max_events,
            window.max_bytes,
            stall_timeout=stall_timeout,
            in_flight=self._unseen,
        )
        # Read by this replica's stream reader (while it has subscribers).
        self._watching = False
        self._closed = False
        self.last_activity = time.monotonic()
        # Writes waiting for the flusher, in call order, and the tokens whose
        # writes failed (their later writes are refused too).
        self._queue: list[_Pending] = []
        self._flusher: asyncio.Task[None] | None = None
        self._failed: dict[int | None, BaseException] = {}
        # What this process wrote that the reader has not handed out yet: the
        # events and UTF-16 units not yet appended (queued or on their way),
        # and the (seq, units) of those appended.
        self._unsent = [0, 0]
        self._written: deque[tuple[int, int]] = deque()
        self._written_units = 0
        # The newest kept seq handed out to this replica's subscribers (by
        # the reader or the writer), None while not known: a batch of this
        # replica's that follows on from it goes to them at once.
        self._read_seq: int | None = None
        # The stream position the reader here started from (while reading).
        self._watch_from = 0

    def _unread(self) -> tuple[int, int]:
        """Appended by this process, not yet handed out by the reader."""
        return len(self._written), self._written_units

    def _unseen(self) -> tuple[int, int]:
        return self._unsent[0] + len(self._written), self._unsent[1] + self._written_units

    def _sent(self, items: Sequence[_Pending]) -> None:
        self._unsent[0] -= len(items)
        self._unsent[1] -= sum(p.body.size for p in items)

    @property
    def subscriber_count(self) -> int:
        return len(self._fanout)

    @property
    def stall_timeout(self) -> float:
        return self._fanout.stall_timeout

    @property
    def reading(self) -> bool:
        return self._watching

    async def last_event_id(self) -> str | None:
        with unavailable_on_failure():
            epoch, top = await self._conn.reads.hmget(self._meta, ["epoch", "next"])
        if epoch is None or top is None or int(top) == 0:
            return None
        return format_event_id(epoch.decode(), int(top))

    @property
    def congested(self) -> bool:
        """Redis is behind the writer, or a local subscriber that keeps up is
        about to fall out of the window (see the module docstring)."""
        return len(self._queue) > _MAX_QUEUED or self._fanout.congested

    def publish_nowait(
        self, body: EventBody, *, fence: int | None = None, end_run: bool = False
    ) -> asyncio.Future[HubEvent]:
        """Queues ``body``; one flusher sends what has queued meanwhile in one
        script call, so a fast producer pays one round trip (and, with
        ``appendfsync always``, one fsync) per batch, not per event."""
        future: asyncio.Future[HubEvent] = asyncio.get_running_loop().create_future()
        failed = self._failed.get(fence)
        if failed is not None:
            # A write with this token already failed: nothing after it may land,
            # or the log would have a hole the trace does not.
            future.set_exception(failed)
            # Retrieved: its owner sees it when it awaits; one it never awaits
            # (the rest of a publish_many after the first refusal) is not
            # reported with a traceback when it is freed.
            future.exception()
            return future
        self._queue.append(_Pending(body, fence, end_run, future))
        self._unsent[0] += 1
        self._unsent[1] += body.size
        if self._flusher is None:
            self._flusher = asyncio.create_task(self._flush())
        self._fanout.press()
        return self._fanout.hold(future)

    def forgive(self, fence: int | None) -> None:
        self._failed.pop(fence, None)

    async def publish(
        self, body: EventBody, *, fence: int | None = None, end_run: bool = False
    ) -> HubEvent:
        return await self.publish_nowait(body, fence=fence, end_run=end_run)

    async def publish_many(
        self, items: Sequence[EventBody], *, fence: int | None = None
    ) -> list[HubEvent]:
        futures = [self.publish_nowait(body, fence=fence) for body in items]
        return [await f for f in futures]

    async def _flush(self) -> None:
        try:
            while self._queue:
                batch = self._next_batch()
                first = batch[0]
                try:
                    # The script trims the stream as it appends: wait until a
                    # reader here that keeps up has been handed what it would
                    # trim (a message larger than the window is written once
                    # the reader has read the rest).
                    await self._fanout.room(
                        len(batch), sum(p.body.size for p in batch), self._unread
                    )
                    events = await self._append(
                        [p.body for p in batch], first.fence, batch[-1].end_run
                    )
                except BaseException as exc:
                    self._sent(batch)
                    self._failed[first.fence] = exc
                    dropped = [p for p in self._queue if p.fence == first.fence]
                    self._sent(dropped)
                    failed = batch + dropped
                    self._queue = [p for p in self._queue if p.fence != first.fence]
                    for pending in failed:
                        if not pending.future.done():
                            pending.future.set_exception(exc)
                            pending.future.exception()  # retrieved: the owner sees it
                    self._fanout.landed()
                    if isinstance(exc, asyncio.CancelledError):
                        raise
                    continue
                self._sent(batch)
                # This replica's own events go to its subscribers from here
                # when they follow on from the last one handed out (nothing of
                # another replica's came between), not read back from Redis; the
                # reader passes over them. Else the reader hands them out, in
                # the stream's order.
                read = self._read_seq
                local = self._watching and read is not None and events[0].prev == read
                if local and self._staged:  # its large bodies are handed out with it
                    self._staged = {r: v for r, v in self._staged.items() if v[0] > events[-1].seq}
                for pending, event in zip(batch, events, strict=True):
                    if local:
                        self._fan_out(event)
                    elif self._watching and (read is None or event.seq > read):
                        # On its way to local subscribers (unless the reader was quicker).
                        self._written.append((event.seq, pending.body.size))
                        self._written_units += pending.body.size
                    if not pending.future.done():
                        pending.future.set_result(event)
                self._fanout.landed()
        finally:
            self._flusher = None

    def _next_batch(self) -> list[_Pending]:
        """The longest prefix of the queue with one token, ending at the first
        end_run, within the batch limits."""
        batch: list[_Pending] = []
        size = units = 0
        max_events, max_units = self._window.max_events, self._window.max_bytes
        while self._queue and len(batch) < min(_BATCH_EVENTS, max_events):
            pending = self._queue[0]
            if batch and (
                pending.fence != batch[0].fence
                or size >= _BATCH_BYTES
                # One batch never trims its own events: a reader could not
                # have been handed them.
                or units + pending.body.size > max_units
            ):
                break
            batch.append(self._queue.pop(0))
            size += len(pending.body.data)
            units += pending.body.size
            if pending.end_run:
                break
        return batch

    async def _append(
        self, items: list[EventBody], fence: int | None, end_run: bool
    ) -> list[HubEvent]:
        token = b"" if fence is None else str(fence).encode()
        packed = [self._static, _LEN2.pack(len(token)), token, _TAIL.pack(end_run, len(items))]
        payload: list[bytes] = []
        staged: dict[bytes, tuple[int, EventBody]] = {}
        self.last_activity = time.monotonic()
        for offset, body in enumerate(items):
            outside = large_bodies.outside(body.data)
            packed.append(_header(body, outside))
            if not outside:
                payload += (body.data, encode_proto(body))
                continue
            try:
                ref = await self._bodies.stage(body.data)
            except BaseException:
                await self._bodies.discard(staged)
                raise
            staged[ref] = (offset, body)
            payload += (ref, b"")
        args = [b"".join(packed), *payload]
        keys = self._publish_keys
        try:
            with unavailable_on_failure():
                if sum(len(part) for part in payload) > _SHARED_BYTES:
                    epoch_raw, first, before = await self._publish_script(keys=keys, args=args)
                else:
                    epoch_raw, first, before = await self._appender.call(keys, args)
        except Exception as exc:
            if isinstance(exc, ResponseError) or isinstance(exc.__cause__, ResponseError):
                # Refused, so never appended: its large bodies would be
                # orphans. (A write whose outcome is unknown keeps them: if it
                # landed, its entry names them.)
                await self._bodies.discard(staged)
            if "FENCED" in str(exc) and fence is not None:
                raise Fenced(self.session_id, fence) from exc
            refused = re.search(r"RECORD (\d+) (\d+)", str(exc))
            if refused:
                number, last = int(refused[1]), int(refused[2])
                raise RecordOutOfOrder(self.session_id, number, last) from exc
            raise
        epoch = self._epoch = epoch_raw.decode()
        for ref, (offset, body) in staged.items():
            # On its way to the reader here (unless it was quicker).
            read = self._read_seq
            if self._watching and (read is None or int(first) + offset > read):
                self._staged[ref] = (int(first) + offset, body)
        out = []
        prev = int(before) if before else None
        for offset, body in enumerate(items):
            seq = int(first) + offset
            out.append(HubEvent(seq, format_event_id(epoch, seq), body, True, prev))
            prev = seq
        return out

    async def last_record(self) -> int | None:
        with unavailable_on_failure():
            number = await self._conn.reads.hget(self._meta, "rec")
        return int(number) if number else None

    async def replay_after(self, event_id: str) -> list[HubEvent] | None:
        parsed = parse_event_id(event_id)
        if parsed is None:
            return None
        epoch, seq = parsed
        with unavailable_on_failure():
            result = await self._replay_script(
                keys=[self._events, self._meta], args=[epoch, str(seq)]
            )
        if not result or int(result[0]) == 0:
            return None
        entries = [(eid, _pairs(f)) for eid, f in result[1]]
        if await large_bodies.fill(self._bodies, entries) >= 0:
            return None  # trimmed past meanwhile
        return [decode_entry(epoch, eid, f) for eid, f in entries]

    async def window(self) -> list[HubEvent]:
        with unavailable_on_failure():
            epoch = await self._conn.reads.hget(self._meta, "epoch")
            if epoch is None:
                return []
            raw = await self._conn.reads.xrange(self._events, "-", "+")
        entries = [(eid, _pairs(f)) for eid, f in raw]
        # Those up to a body evicted meanwhile are no longer the window.
        gone = await large_bodies.fill(self._bodies, entries)
        return [decode_entry(epoch.decode(), eid, f) for eid, f in entries[gone + 1 :]]

    async def subscribe(
        self, after_event_id: str | None = None, initial: InitialEvents | None = None
    ) -> Subscriber:
        sub = self._fanout.add()
        if self._closed:
            self._fanout.discard(sub)
            sub.end()
            return sub
        self.last_activity = time.monotonic()
        # Registered before the snapshot: whatever the reader delivers from now
        # on is merged by seq, so nothing falls between replay and live.
        try:
            result = await self._snapshot(after_event_id, initial)
        except BaseException:
            self._fanout.discard(sub)
            raise
        epoch, resync, first_initial, top, raw, bodies_, last = result
        self._epoch = epoch
        later: list[Any] = []
        if self._watching and self._watch_from > top:
            # Another subscribe here started the reader after a newer snapshot
            # while this one's was on its way (clients coming back together
            # after a Redis restart): what was written between the two is
            # read for this subscriber here, or it would see a gap no trimming
            # made and be told to resync.
            try:
                with unavailable_on_failure():
                    later = await self._conn.reads.xrange(
                        self._events, f"({top}-0", f"{self._watch_from}-0"
                    )
            except BaseException:
                self._fanout.discard(sub)
                raise
            top = self._watch_from
        # The stream was trimmed past those meanwhile (they do not follow on
        # from the snapshot's newest): the resync stands for them.
        trimmed = (
            bool(later) and last is not None and _pairs(later[0][1]).get(b"pv") != b"%d" % last
        )
        if later:
            last = int(later[-1][0].split(b"-", 1)[0])
        entries = [(eid, _pairs(f)) for eid, f in raw]
        extra = [(eid, _pairs(f)) for eid, f in later]
        try:
            gone = await large_bodies.fill(self._bodies, entries + extra)
        except BaseException:
            self._fanout.discard(sub)
            raise
        resync_last = False
        if gone >= 0 or trimmed:
            # The replay (or what was read after it) was trimmed past while
            # this subscribe was on its way: the resync stands for all of it
            # (the seq of the last entry it replaces), after the initial
            # events when that entry is newer than they are.
            resync = int((entries + extra)[-1][0].split(b"-", 1)[0])
            resync_last = bool(extra)
            entries, extra = [], []
        resync_event = HubEvent(
            resync, format_event_id(epoch, resync), bodies.resync_required_body(), False
        )
        events: list[HubEvent] = []
        if resync and not resync_last:
            events.append(resync_event)
        events.extend(decode_entry(epoch, eid, f) for eid, f in entries)
        for offset, body in enumerate(bodies_):
            seq = first_initial + offset
            events.append(HubEvent(seq, format_event_id(epoch, seq), body, False))
        events.extend(decode_entry(epoch, eid, f) for eid, f in extra)
        if resync_last:
            events.append(resync_event)
        sub.start(events, top, last)
        if not self._watching:
            # The reader starts after ``top``: the stream's entries up to it
            # were in the snapshot, the newest of them ``last``.
            self._watching = True
            self._read_seq = last
            self._watch_from = top
            await streams_of(self._conn).watch(self._events, f"{top}-0", self)
        return sub

    async def _snapshot(
        self, after_event_id: str | None, initial: InitialEvents | None
    ) -> tuple[str, int, int, int, list[Any], Sequence[EventBody], int | None]:
        replay, after_epoch, after_seq = "0", "", ""
        if after_event_id:
            replay = "1"
            parsed = parse_event_id(after_event_id)
            if parsed is not None:
                after_epoch, after_seq = parsed[0], str(parsed[1])
        keys = [self._events, self._meta, self._run, self._bodies.key]
        with unavailable_on_failure():
            while True:
                # The version guards initial events against a state change
                # they missed; with none there is nothing to guard (a Run's
                # own subscription: a round trip less before its first event).
                version = None
                if initial is not None:
                    version = await self._conn.reads.hget(self._meta, "ver")
                bodies_ = await initial_bodies(initial)
                result = await self._subscribe_script(
                    keys=keys,
                    args=[
                        self._candidate,
                        replay,
                        after_epoch,
                        after_seq,
                        len(bodies_),
                        "" if version is None else version,
                        self._ttl_ms,
                    ],
                )
                if result[0] == b"ok":
                    break
        _, epoch, resync, first, top, entries, last = result
        newest = int(last) if last else None
        return epoch.decode(), int(resync), int(first), int(top), entries, bodies_, newest

    # ---- what the stream reader calls (``stream_reader.Watch``) ----------------------

    def wanted(self) -> bool:
        return bool(self._fanout.subscribers) and not self._closed

    async def entries(self, entries: list[Any]) -> None:
        epoch = self._epoch or ""
        for entry_id, raw in entries:
            seq = int(entry_id.split(b"-", 1)[0])
            # Else this replica's own, handed out when it was written.
            if self._read_seq is None or seq > self._read_seq:
                await self._hand_out(epoch, entry_id, _pairs(raw))
            if self._staged:  # what the stream was trimmed past is never read
                self._staged = {r: v for r, v in self._staged.items() if v[0] > seq}

    async def _hand_out(self, epoch: str, entry_id: bytes, fields: dict[bytes, bytes]) -> None:
        ref = fields.get(b"x")
        if ref is None:
            self._fan_out(decode_entry(epoch, entry_id, fields))
        elif (mine := self._staged.pop(ref, None)) is not None:
            event = decode_entry(epoch, entry_id, {**fields, b"d": mine[1].data})
            self._fan_out(replace(event, body=mine[1]))
        elif await large_bodies.fill(self._bodies, [(entry_id, fields)]) < 0:
            # Unless this replica's writer handed it out meanwhile (its own,
            # read before the write's reply came back).
            read = self._read_seq
            if read is None or int(entry_id.split(b"-", 1)[0]) > read:
                self._fan_out(decode_entry(epoch, entry_id, fields))
        # else: evicted meanwhile by another replica's write, so trimmed
        # past: the next entry names it as its predecessor (a gap), and
        # the subscribers are told to resync.

    def released(self) -> None:
        self._watching = False
        self._read_seq = None
        self._written.clear()
        self._written_units = 0
        self._staged.clear()

    def lost(self, error: BackendUnavailable) -> None:
        log.warning("session %s: event stream lost: %s", self.session_id, error)
        self.released()
        self._fanout.fail(error)

    def keep_alive(self) -> tuple[list[str], int]:
        return [self._events, self._meta, self._bodies.key], int(self._ttl_ms)

    def _fan_out(self, event: HubEvent) -> None:
        self._read_seq = event.seq
        written = self._written
        while written and written[0][0] <= event.seq:
            # handed out now (or skipped, if the stream was trimmed past it)
            self._written_units -= written.popleft()[1]
        # A gap, or a backlog larger than the window: serving it would mean
        # keeping evicted events alive for it.
        behind = self._fanout.deliver(event)
        behind.extend(s for s in self._fanout.overflowing() if s not in behind)
        if not behind:
            return
        # The resync takes the id of the last event it stands for (the one
        # before ``event``), and ``event`` follows it. The reader sees a
        # backlog pass the window only once it has read the event that pushed
        # it there, and any seq newer than that one may already belong to
        # events on their way (the task end a Run call waits for among them):
        # a resync that took one would silently skip them.
        missed = event.prev if event.prev is not None else max(event.seq - 1, 0)
        resync = HubEvent(
            missed,
            format_event_id(event.event_id.rsplit("-", 1)[0], missed),
            bodies.resync_required_body(),
            False,
        )
        for sub in behind:
            sub.cut_off(resync, then=event)

    async def close(self) -> None:
        self._closed = True
        self._fanout.end()
        if self._watching:
            streams_of(self._conn).unwatch(self._events, self)


class RedisEventLogs(LogRegistry[RedisEventLog]):
    def __init__(
        self,
        conn: RedisConnection,
        window: ReplayWindow,
        *,
        idle_ttl: float = 30 * 60,
        stall_timeout: float = DEFAULT_STALL_TIMEOUT,
    ) -> None:
        super().__init__(idle_ttl)
        self._conn = conn
        self._window = window
        self._stall_timeout = stall_timeout

    def _create(self, session_id: str) -> RedisEventLog:
        return RedisEventLog(
            self._conn,
            session_id,
            self._window,
            idle_ttl=self.idle_ttl,
            stall_timeout=self._stall_timeout,
        )

    def _is_idle(self, log: RedisEventLog) -> bool:
        # Only this replica's handle is dropped: Redis keeps the data and
        # expires it by itself.
        return not log.reading

    async def _discard(self, session_id: str) -> None:
        # Every key of the session's own (its hash tag): a deleted session
        # leaves none (tests/test_redis_session_keys.py). Its run was ended
        # before the deletion; a stale member of the open-runs set is dropped
        # by the next orphan sweep, which finds no run key.
        k = self._conn.session_key
        parts = ("events", "meta", "fence", "lease", "run", "holder", "beat", "bodies")
        with unavailable_on_failure():
            await self._conn.commands.delete(*(k(session_id, part) for part in parts))

    async def last_event_id(self, session_id: str) -> str | None:
        return await self.get(session_id).last_event_id()
