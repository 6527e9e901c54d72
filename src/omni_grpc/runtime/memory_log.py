"""The default event log: an in-process ring buffer (reference channel limits)."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence

from omni_grpc.runtime.event_log import (
    InitialEvents,
    LogRegistry,
    ReplayWindow,
    initial_bodies,
)
from omni_grpc.runtime.events import EventBody, HubEvent, format_event_id, parse_event_id

DEFAULT_MAX_COUNT = ReplayWindow().max_events
DEFAULT_MAX_BYTES = ReplayWindow().max_bytes

# Called with (token) when a run's last event is published (see EventLog.publish).
RunEnder = Callable[[int], object]


# Back-pressure: a subscriber whose queue fills this share of the window holds
# the writer back until it has read down to LOW_WATER, unless it has not done
# so within the log's stall timeout (then it is let go, and cut off as before
# once the window moves past its queue).
HIGH_WATER = 0.9
LOW_WATER = 0.5
DEFAULT_STALL_TIMEOUT = 2.0


class MemorySubscription:
    """A subscriber's bounded queue. The log fills it; the transport drains it."""

    def __init__(self, log: MemoryEventLog) -> None:
        self._log = log
        self._queue: deque[HubEvent] = deque()
        self._bytes = 0
        self._wakeup = asyncio.Event()
        self._closed = False
        # Let go by the back-pressure: it did not read down in time.
        self.lagging = False
        # Events dropped by cut-offs, for tests and metrics.
        self.cutoffs = 0

    def _push(self, event: HubEvent) -> None:
        if self._closed:
            return
        self._queue.append(event)
        self._bytes += event.body.size
        self._wakeup.set()

    def level(self) -> float:
        """How full the queue is, as a share of the log's window."""
        log = self._log
        return max(len(self._queue) / log._max_count, self._bytes / log._max_bytes)

    def _oldest_seq(self) -> int | None:
        return self._queue[0].seq if self._queue else None

    def _cut_off(self, resync: HubEvent) -> None:
        """Drops the backlog this subscriber can no longer be served from."""
        self.cutoffs += 1
        self._queue.clear()
        self._bytes = 0
        self.lagging = False
        self._push(resync)

    def _end(self) -> None:
        self._closed = True
        self._wakeup.set()

    @property
    def pending(self) -> int:
        return len(self._queue)

    async def next(self) -> HubEvent | None:
        while not self._queue:
            if self._closed:
                return None
            self._wakeup.clear()
            await self._wakeup.wait()
        event = self._queue.popleft()
        self._bytes -= event.body.size
        if self.level() <= LOW_WATER:
            self.lagging = False
            if self._log._pressed_by is self:
                self._log._relieve()
        return event

    def __aiter__(self) -> AsyncIterator[HubEvent]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[HubEvent]:
        while (event := await self.next()) is not None:
            yield event

    def close(self) -> None:
        if not self._closed:
            self._queue.clear()
            self._bytes = 0
            self._end()
            self._log._subscribers.discard(self)
            if self._log._pressed_by is self:
                self._log._relieve()


class MemoryEventLog:
    """Ring buffer of at most ``max_count`` events / ``max_bytes`` UTF-16 units.

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
        self._subscribers: set[MemorySubscription] = set()
        self._closed = False
        # time.monotonic() of the last publish or subscribe (idle reclaiming).
        self.last_activity = time.monotonic()
        # Releases the run lease (wired by the memory backend).
        self.end_run: RunEnder | None = None
        # Back-pressure: the subscriber the writer waits for, the futures of the
        # writes made meanwhile, and the timer that lets a stalled one go.
        self.stall_timeout = stall_timeout
        self._pressed_by: MemorySubscription | None = None
        self._held: list[asyncio.Future[HubEvent]] = []
        self._held_events: dict[asyncio.Future[HubEvent], HubEvent] = {}
        self._stall_timer: asyncio.TimerHandle | None = None

    @property
    def epoch(self) -> str:
        return self._epoch

    async def last_event_id(self) -> str | None:
        if self._next_seq == 1:
            return None
        return format_event_id(self._epoch, self._next_seq - 1)

    @property
    def subscriber_count(self) -> int:
        return len(self._subscribers)

    def buffer_stats(self) -> tuple[int, int]:
        """(events, UTF-16 units) in the replay buffer now."""
        return len(self._buffer), self._bytes

    def _take_seq(self, body: EventBody, *, buffered: bool) -> HubEvent:
        seq = self._next_seq
        self._next_seq += 1
        return HubEvent(seq, format_event_id(self._epoch, seq), body, buffered)

    @property
    def congested(self) -> bool:
        return self._pressed_by is not None

    def publish_nowait(
        self, body: EventBody, *, fence: int | None = None, end_run: bool = False
    ) -> asyncio.Future[HubEvent]:
        """Publishes at once. The future is done at once too, unless a subscriber
        that keeps up has nearly filled its queue: then it resolves when that
        subscriber has read down (or has stalled), so a writer that waits for
        it goes at the reader's pace instead of cutting the reader off."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[HubEvent] = loop.create_future()
        event = self._publish(body)
        if end_run and fence is not None and self.end_run is not None:
            self.end_run(fence)
        if self._pressed_by is None:
            pressing = [s for s in self._subscribers if not s.lagging and s.level() >= HIGH_WATER]
            if pressing:
                self._pressed_by = max(pressing, key=lambda s: s.level())
                self._stall_timer = loop.call_later(self.stall_timeout, self._stalled)
        if self._pressed_by is None:
            future.set_result(event)
        else:
            self._held.append(future)
            self._held_events[future] = event
        return future

    def _relieve(self) -> None:
        if self._stall_timer is not None:
            self._stall_timer.cancel()
            self._stall_timer = None
        self._pressed_by = None
        held, self._held = self._held, []
        for future in held:
            event = self._held_events.pop(future)
            if not future.done():
                future.set_result(event)

    def _stalled(self) -> None:
        """The subscriber did not read down in time: it no longer holds the
        writer back (and is cut off once the window passes its queue)."""
        if self._pressed_by is not None:
            self._pressed_by.lagging = True
        self._stall_timer = None
        self._relieve()

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
        futures = [self.publish_nowait(body, fence=fence) for body in items]
        return [await f for f in futures]

    def _publish(self, body: EventBody) -> HubEvent:
        self.last_activity = time.monotonic()
        size = body.size
        # Evict first, so any resync_required sent to a cut-off subscriber
        # takes a lower seq than this event.
        self._evict(incoming=size)
        event = self._take_seq(body, buffered=True)
        # Subscribers get the decoded event; the window keeps only its text.
        self._buffer.append((event.stored(), size))
        self._bytes += size
        for sub in self._subscribers:
            sub._push(event)
        return event

    def _evict(self, incoming: int) -> None:
        # The incoming event always gets in, even when it alone exceeds max_bytes.
        while self._buffer and (
            len(self._buffer) + 1 > self._max_count or self._bytes + incoming > self._max_bytes
        ):
            old, size = self._buffer.popleft()
            self._bytes -= size
            self._last_evicted_seq = old.seq
            for sub in self._subscribers:
                oldest = sub._oldest_seq()
                if oldest is not None and oldest <= old.seq:
                    # Its backlog reaches past the buffer: serving it would keep
                    # evicted events alive, so it must resync instead.
                    sub._cut_off(self._take_seq(self._resync_body, buffered=False))

    async def replay_after(self, event_id: str) -> list[HubEvent] | None:
        return self._replay_after(event_id)

    def _replay_after(self, event_id: str) -> list[HubEvent] | None:
        parsed = parse_event_id(event_id)
        if parsed is None:
            return None
        epoch, seq = parsed
        if epoch != self._epoch or not (self._last_evicted_seq <= seq < self._next_seq):
            return None
        return [event for event, _ in self._buffer if event.seq > seq]

    async def window(self) -> list[HubEvent]:
        return [event for event, _ in self._buffer]

    async def subscribe(
        self, after_event_id: str | None = None, initial: InitialEvents | None = None
    ) -> MemorySubscription:
        self.last_activity = time.monotonic()
        # The initial events must describe the session as of this subscription:
        # build them again if a publish overtook them.
        while True:
            mark = self._next_seq
            bodies = await initial_bodies(initial)
            if mark == self._next_seq:
                break
        sub = MemorySubscription(self)
        if self._closed:
            sub._end()
            return sub
        if after_event_id:
            replay = self._replay_after(after_event_id)
            if replay is None:
                sub._push(self._take_seq(self._resync_body, buffered=False))
            else:
                for event in replay:
                    sub._push(event)
        for body in bodies:
            sub._push(self._take_seq(body, buffered=False))
        self._subscribers.add(sub)
        return sub

    async def close(self) -> None:
        self._closed = True
        for sub in list(self._subscribers):
            sub._end()
        self._subscribers.clear()
        self._relieve()


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
