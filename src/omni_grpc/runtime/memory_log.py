"""The default event log: an in-process ring buffer (reference channel limits)."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections import deque
from collections.abc import Callable, Sequence

from omni_grpc.runtime.errors import RecordOutOfOrder
from omni_grpc.runtime.event_log import (
    InitialEvents,
    LogRegistry,
    ReplayWindow,
    initial_bodies,
)
from omni_grpc.runtime.events import EventBody, HubEvent, format_event_id, parse_event_id
from omni_grpc.runtime.fanout import DEFAULT_STALL_TIMEOUT, Fanout, Subscriber

DEFAULT_MAX_COUNT = ReplayWindow().max_events
DEFAULT_MAX_BYTES = ReplayWindow().max_bytes

# Called with (token) when a run's last event is published (see EventLog.publish).
RunEnder = Callable[[int], object]


class MemoryEventLog:
    """Ring buffer of at most ``max_count`` events / ``max_bytes`` UTF-16 units,
    its subscribers served by a :class:`~omni_grpc.runtime.fanout.Fanout`.

    No method awaits anything, so each call is atomic on the event loop.
    """

    def __init__(
        self,
        resync_body: EventBody,
        *,
        max_count: int = DEFAULT_MAX_COUNT,
        max_bytes: int = DEFAULT_MAX_BYTES,
        epoch: str | None = None,
        stall_timeout: float = DEFAULT_STALL_TIMEOUT,
    ) -> None:
        if max_count < 1 or max_bytes < 1:
            raise ValueError("max_count and max_bytes must be positive")
        self._epoch = epoch or secrets.token_hex(4)
        self._resync_body = resync_body
        self._max_count = max_count
        self._max_bytes = max_bytes
        self._buffer: deque[tuple[HubEvent, int]] = deque()
        self._bytes = 0
        self._next_seq = 1
        self._last_evicted_seq = 0
        self._last_kept = 0  # the newest kept seq (every kept event names its predecessor)
        # The newest record number taken (EventBody.record); None before the first.
        self._last_record: int | None = None
        # For RecordOutOfOrder (the registry names its logs).
        self.session_id = ""
        self._fanout = Fanout(max_count, max_bytes, stall_timeout=stall_timeout)
        self._closed = False
        # time.monotonic() of the last publish or subscribe (idle reclaiming).
        self.last_activity = time.monotonic()
        # Releases the run lease (wired by the memory backend).
        self.end_run: RunEnder | None = None

    @property
    def epoch(self) -> str:
        return self._epoch

    async def last_event_id(self) -> str | None:
        if self._next_seq == 1:
            return None
        return format_event_id(self._epoch, self._next_seq - 1)

    @property
    def subscriber_count(self) -> int:
        return len(self._fanout)

    async def last_record(self) -> int | None:
        return self._last_record

    def _check_records(self, items: Sequence[EventBody]) -> None:
        """Raises ``RecordOutOfOrder`` unless each numbered body follows the
        last number (the log's, then the one before it in ``items``)."""
        last = self._last_record
        for body in items:
            number = body.record
            if number is None:
                continue
            if last is not None and number != last + 1:
                raise RecordOutOfOrder(self.session_id, number, last)
            last = number

    @property
    def stall_timeout(self) -> float:
        return self._fanout.stall_timeout

    @stall_timeout.setter
    def stall_timeout(self, seconds: float) -> None:
        self._fanout.stall_timeout = seconds

    def buffer_stats(self) -> tuple[int, int]:
        """(events, UTF-16 units) in the replay buffer now."""
        return len(self._buffer), self._bytes

    def _take_seq(self, body: EventBody, *, buffered: bool) -> HubEvent:
        seq = self._next_seq
        self._next_seq += 1
        return HubEvent(seq, format_event_id(self._epoch, seq), body, buffered)

    @property
    def congested(self) -> bool:
        return self._fanout.congested

    def publish_nowait(
        self, body: EventBody, *, fence: int | None = None, end_run: bool = False
    ) -> asyncio.Future[HubEvent]:
        """Publishes at once. The future is done at once too, unless a subscriber
        that keeps up has nearly filled its queue: then it resolves when that
        subscriber has read down (or has stalled), so a writer that waits for
        it goes at the reader's pace instead of cutting the reader off."""
        future: asyncio.Future[HubEvent] = asyncio.get_running_loop().create_future()
        try:
            self._check_records((body,))
        except RecordOutOfOrder as exc:
            future.set_exception(exc)  # refused as a shared log refuses: nothing kept
            return future
        future.set_result(self._publish(body))
        if end_run and fence is not None and self.end_run is not None:
            self.end_run(fence)
        self._fanout.press()
        return self._fanout.hold(future)

    def forgive(self, fence: int | None) -> None:
        return None

    async def publish(
        self, body: EventBody, *, fence: int | None = None, end_run: bool = False
    ) -> HubEvent:
        # One process holds every lease, so there is no stale writer to fence.
        return await self.publish_nowait(body, fence=fence, end_run=end_run)

    async def publish_many(
        self, items: Sequence[EventBody], *, fence: int | None = None
    ) -> list[HubEvent]:
        self._check_records(items)  # all or nothing
        futures = [self.publish_nowait(body, fence=fence) for body in items]
        return [await f for f in futures]

    def _publish(self, body: EventBody) -> HubEvent:
        self.last_activity = time.monotonic()
        size = body.size
        # Evict first, so any resync_required sent to a cut-off subscriber
        # takes a lower seq than this event.
        self._evict(incoming=size)
        seq = self._next_seq
        self._next_seq += 1
        event = HubEvent(seq, format_event_id(self._epoch, seq), body, True, self._last_kept)
        self._last_kept = seq
        if body.record is not None:
            self._last_record = body.record
        # Subscribers get the decoded event; the window keeps only its text.
        self._buffer.append((event.stored(), size))
        self._bytes += size
        behind = self._fanout.deliver(event)
        # A writer that does not wait (``congested``) cannot grow a backlog
        # without end: past the window even a reader that reads is cut off.
        behind.extend(s for s in self._fanout.overflowing() if s not in behind)
        self._cut_off(behind)
        return event

    def _cut_off(self, subs: Sequence[Subscriber]) -> None:
        for sub in subs:
            sub.cut_off(self._take_seq(self._resync_body, buffered=False))

    def _evict(self, incoming: int) -> None:
        # The incoming event always gets in, even when it alone exceeds max_bytes.
        while self._buffer and (
            len(self._buffer) + 1 > self._max_count or self._bytes + incoming > self._max_bytes
        ):
            old, size = self._buffer.popleft()
            self._bytes -= size
            self._last_evicted_seq = old.seq
            # A lagging reader's backlog reaching past the buffer: serving it
            # would keep evicted events alive, so it must resync instead. One
            # that keeps up keeps what it was handed: the writer waits for it.
            self._cut_off(self._fanout.trimmed(old.seq))

    async def replay_after(self, event_id: str) -> list[HubEvent] | None:
        return self._replay_after(event_id)

    def _replay_after(self, event_id: str) -> list[HubEvent] | None:
        parsed = parse_event_id(event_id)
        if parsed is None:
            return None
        epoch, seq = parsed
        if epoch != self._epoch or not (self._last_evicted_seq <= seq < self._next_seq):
            return None
        return [event.replayed() for event, _ in self._buffer if event.seq > seq]

    async def window(self) -> list[HubEvent]:
        return [event.replayed() for event, _ in self._buffer]

    async def subscribe(
        self, after_event_id: str | None = None, initial: InitialEvents | None = None
    ) -> Subscriber:
        self.last_activity = time.monotonic()
        # The initial events must describe the session as of this subscription:
        # build them again if a publish overtook them.
        while True:
            mark = self._next_seq
            bodies = await initial_bodies(initial)
            if mark == self._next_seq:
                break
        # From here to start() nothing awaits: the snapshot is atomic.
        sub = self._fanout.add()
        if self._closed:
            self._fanout.discard(sub)
            sub.end()
            return sub
        events: list[HubEvent] = []
        if after_event_id:
            replay = self._replay_after(after_event_id)
            if replay is None:
                events.append(self._take_seq(self._resync_body, buffered=False))
            else:
                events.extend(replay)
        events.extend(self._take_seq(body, buffered=False) for body in bodies)
        sub.start(events, self._next_seq - 1, self._last_kept)
        return sub

    async def close(self) -> None:
        self._closed = True
        self._fanout.end()


class MemoryEventLogs(LogRegistry[MemoryEventLog]):
    """One ring buffer per session, dropped after ``idle_ttl`` seconds unused.

    Like the reference channel, a log idle, unwatched and not held by a run for
    that long is reclaimed; its replacement's new epoch makes old ids resync.
    """

    def __init__(
        self,
        resync_body: EventBody,
        *,
        max_count: int = DEFAULT_MAX_COUNT,
        max_bytes: int = DEFAULT_MAX_BYTES,
        idle_ttl: float = 30 * 60,
        factory: Callable[[str], MemoryEventLog] | None = None,
        end_run: Callable[[str, int], object] | None = None,
    ) -> None:
        super().__init__(idle_ttl)
        self._factory = factory or (
            lambda _sid: MemoryEventLog(resync_body, max_count=max_count, max_bytes=max_bytes)
        )
        self._end_run = end_run

    def _create(self, session_id: str) -> MemoryEventLog:
        log = self._factory(session_id)
        log.session_id = session_id
        if self._end_run is not None:
            ender = self._end_run
            log.end_run = lambda token: ender(session_id, token)
        return log

    def _is_idle(self, log: MemoryEventLog) -> bool:
        return log.last_activity < time.monotonic() - self.idle_ttl

    def _released(self, log: MemoryEventLog) -> None:
        log.last_activity = time.monotonic()

    async def last_event_id(self, session_id: str) -> str | None:
        log = self._logs.get(session_id)
        return await log.last_event_id() if log is not None else None
