"""Fan-out: one log's subscribers in this process, whatever the backend.

A backend only appends, replays, reports its window and hands each event to
:meth:`Fanout.deliver` in log order (the memory log as it publishes, the
Redis log as its one reader of the stream receives). Everything a subscriber
sees is decided here, once for every backend:

* its queue, ``next`` and ``close``, and the end or failure of the log;
* the merge of a subscribe: events delivered while a backend was still
  taking the subscriber's snapshot are kept aside, and those the snapshot
  already covered are dropped, so replay, initial events and live follow on;
* contiguity: every kept event names the kept event before it
  (``HubEvent.prev``). A subscriber whose next kept event does not follow on
  from the last one it was given (the window moved past a reader that was
  not there to see it) is never handed the event after the gap silently: it
  is cut off like a reader that fell behind;
* back-pressure: a subscriber that keeps up and nearly fills its share of
  the window holds back this process's writer (``congested``, and the
  futures of ``hold``) until it has read down, unless it does not read down
  within the stall timeout (plus a second per MiB it has to send: its
  backlog and the event it took last, ``STALL_RATE``); then it is let go,
  and cut off once its backlog reaches past the window. The writer goes on
  only once no subscriber that keeps up is nearly full: when the one it
  waited for reads down, it waits for the next such one (readers of the same
  large message read it at the same time, but not at the same pace). What a
  subscriber was handed stays queued when the window evicts it, so a message
  larger than the window reaches it whole;
* room: a backend that trims where the writer cannot hold it (a shared
  stream) waits before each write until its subscribers that keep up have
  been handed what the write would trim (``room``);
* the cut-off: the backlog is dropped and ``resync_required`` takes its
  place; its own event id is where the subscriber goes on live from (it
  fetches history for what it missed), as the reference channel does.

What each backend can see of its window differs, so it picks the cut-off
rule it can observe: the memory log reports each eviction (:meth:`trimmed`),
the Redis log, which cannot see another replica trim, cuts off a backlog
larger than the window (:meth:`overflowing`). A backend gives the resync its
seq (``cut_off``) because only the backend can take one.
"""

from __future__ import annotations

import asyncio
import functools
from collections import deque
from collections.abc import AsyncIterator, Callable

from omni_grpc.runtime.events import HubEvent

# Back-pressure: a subscriber whose queue fills this share of the window holds
# the writer back until it has read down to LOW_WATER, unless it has not done
# so within the stall timeout.
HIGH_WATER = 0.9
LOW_WATER = 0.5
DEFAULT_STALL_TIMEOUT = 2.0
# A subscriber gets the stall timeout plus a second for each this many UTF-16
# units it has to send (its backlog and the event it took last): a reader
# that keeps up is one that reads at least this fast, so a 60 MiB message
# that takes seconds to encode, fetch and send does not make it one that
# stopped.
STALL_RATE = 1024 * 1024

# Called with each event a subscriber is handed (metrics count deliveries).
Observer = Callable[[HubEvent], None]
# Events and UTF-16 units this process has written that no subscriber has
# been handed yet (a shared backend's round trip): they count against every
# subscriber's share of the window before they arrive.
InFlight = Callable[[], tuple[int, int]]


class Subscriber:
    """One subscriber's ordered queue. The fan-out fills it; a transport drains it."""

    def __init__(self, fanout: Fanout) -> None:
        self._fanout = fanout
        self._queue: deque[HubEvent] = deque()
        self._bytes = 0
        self._wakeup = asyncio.Event()
        self._closed = False
        self._error: BaseException | None = None
        # Live events at or below this seq were covered by the snapshot (or a
        # cut-off); None while the backend still takes the snapshot.
        self._after: int | None = None
        self._early: list[HubEvent] = []
        # The seq of the last kept event this subscriber was given or skipped
        # past: the next kept one must name it as its ``prev``.
        self._last_kept: int | None = None
        self._observer: Observer | None = None
        # The size of the last event taken (what the transport may still be sending).
        self.taking = 0
        # Let go by the back-pressure: it did not read down in time.
        self.lagging = False
        # Cut-offs so far (tests and metrics).
        self.cutoffs = 0
        # Events queued for it so far (the stall budget restarts when it is
        # handed more to send).
        self.received = 0

    # ---- what the backend and the fan-out call ---------------------------------

    def start(self, events: list[HubEvent], after: int, last_kept: int | None) -> None:
        """The snapshot is taken: ``events`` (replayed gap, initial events)
        come first; live events up to ``after`` were in it; ``last_kept`` is
        the newest kept seq it saw."""
        self._after = after
        self._last_kept = last_kept
        for event in events:
            self._append(event)
        early, self._early = self._early, []
        for event in early:
            if not self.push(event):
                self._fanout.gapped.append(self)
        self._wakeup.set()

    def push(self, event: HubEvent) -> bool:
        """Queues a live event; False when it does not follow on from the last
        kept one (the caller cuts this subscriber off)."""
        if self._closed:
            return True
        if self._after is None:  # still subscribing: keep for the merge
            self._early.append(event)
            return True
        if event.buffered:
            follows = event.prev is None or self._last_kept is None or event.prev == self._last_kept
            if event.seq <= self._after:  # covered already
                self._last_kept = max(self._last_kept or 0, event.seq)
                return True
            self._last_kept = event.seq
            if not follows:
                return False
        elif event.seq <= self._after:
            return True
        self._append(event)
        self._wakeup.set()
        return True

    def _append(self, event: HubEvent) -> None:
        self.received += 1
        self._queue.append(event)
        self._bytes += event.body.size

    def cut_off(self, resync: HubEvent, then: HubEvent | None = None) -> None:
        """Drops the backlog this subscriber can no longer be served from:
        ``resync`` (a seq at least as new as all of it) takes its place, and
        ``then``, when given, the event newer than the resync that stays
        queued behind it."""
        if self._closed:
            return
        self.cutoffs += 1
        self._queue.clear()
        self._bytes = 0
        # A lagging subscriber stays let go until it reads down (``next``): one
        # that has stopped holds the writer back once, not once per window.
        self._after = max(self._after or 0, resync.seq)
        self._append(resync)
        if then is not None and then.seq > resync.seq:
            self._after = max(self._after, then.seq)
            self._append(then)
        self._wakeup.set()
        self._fanout.room_changed()
        if self._fanout.pressed_by is self:
            self._fanout.relieve()

    def fail(self, error: BaseException) -> None:
        self._error = error
        self.end()

    def end(self) -> None:
        self._closed = True
        self._wakeup.set()

    def level(self, extra: tuple[int, int] = (0, 0)) -> float:
        """How full the queue is (with ``extra`` on its way), as a share of the window."""
        count, units = self._fanout.limits
        return max((len(self._queue) + extra[0]) / count, (self._bytes + extra[1]) / units)

    def oldest_seq(self) -> int | None:
        return self._queue[0].seq if self._queue else None

    def over_window(self) -> bool:
        """Its backlog, apart from its largest event, is larger than the
        window: more than a writer that waits for it (back-pressure) ever lets
        it hold, so it has not kept up.

        Apart from the largest, not the newest: a message larger than the
        window, still being sent, may be followed by small events (from a
        writer that does not wait, such as an approval's, or the one write a
        waiting writer makes before it hears it must wait) without the reader
        having fallen behind. The backlog stays bounded by the window plus one
        message (itself bounded by the record limit)."""
        count, units = self._fanout.limits
        if len(self._queue) - 1 > count:
            return True
        if self._bytes <= units:  # the usual case, without a walk of the queue
            return False
        largest = max(event.body.size for event in self._queue)
        return self._bytes - largest > units

    def has_room(self, count: int, units: int, unread: tuple[int, int]) -> bool:
        """Whether ``count`` events of ``units`` more may be written without
        pushing this subscriber's backlog (with ``unread``, written and not yet
        handed to it) past the window; anything fits an empty backlog, so a
        message larger than the window is written once it has read the rest."""
        if self.lagging or self._after is None:
            return True
        queued, queued_units = len(self._queue) + unread[0], self._bytes + unread[1]
        if queued == 0:
            return True
        max_count, max_units = self._fanout.limits
        return queued + count <= max_count and queued_units + units <= max_units

    # ---- what a transport calls ----------------------------------------------------

    @property
    def pending(self) -> int:
        return len(self._queue)

    @property
    def backlog(self) -> tuple[int, int]:
        """(events, UTF-16 units) queued for this subscriber now."""
        return len(self._queue), self._bytes

    def observe(self, observer: Observer) -> None:
        """``observer`` is called with each event this subscriber is handed."""
        self._observer = observer

    async def next(self) -> HubEvent | None:
        while not self._queue:
            if self._closed:
                if self._error is not None:
                    raise self._error
                return None
            self._wakeup.clear()
            await self._wakeup.wait()
        event = self._queue.popleft()
        self._bytes -= event.body.size
        self.taking = event.body.size
        fanout = self._fanout
        fanout.room_changed()
        pressing = fanout.pressed_by is self
        if (pressing or self.lagging) and self.level(fanout.in_flight()) <= LOW_WATER:
            self.lagging = False
            if pressing:
                fanout.relieve()
        if self._observer is not None:
            self._observer(event)
        return event

    def __aiter__(self) -> AsyncIterator[HubEvent]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[HubEvent]:
        while (event := await self.next()) is not None:
            yield event
            # Not held while waiting for the next: a large event (and the
            # response a transport built from it) is let go once it is sent.
            del event

    def close(self) -> None:
        """Stops delivery and releases the queue (idempotent)."""
        if not self._closed:
            self._queue.clear()
            self._bytes = 0
            self.end()
        self._fanout.discard(self)


class Fanout:
    """The subscribers of one log in this process, and the writer's back-pressure."""

    def __init__(
        self,
        max_count: int,
        max_bytes: int,
        *,
        stall_timeout: float = DEFAULT_STALL_TIMEOUT,
        in_flight: InFlight | None = None,
    ) -> None:
        self.limits = (max_count, max_bytes)
        self.stall_timeout = stall_timeout
        self._in_flight = in_flight
        self.subscribers: set[Subscriber] = set()
        # Subscribers whose merge found a gap: the backend cuts them off.
        self.gapped: list[Subscriber] = []
        # Back-pressure: the subscriber the writer waits for, the writes held
        # meanwhile (the backend's future, the writer's), the stall timer.
        self.pressed_by: Subscriber | None = None
        self._held: list[tuple[asyncio.Future[HubEvent], asyncio.Future[HubEvent]]] = []
        self._stall_timer: asyncio.TimerHandle | None = None
        # What the pressed subscriber had been handed when its budget started.
        self._armed_at = 0
        # Set whenever a subscriber's backlog may have shrunk (``room``).
        self._room = asyncio.Event()

    def __len__(self) -> int:
        return len(self.subscribers)

    def in_flight(self) -> tuple[int, int]:
        return self._in_flight() if self._in_flight is not None else (0, 0)

    def add(self) -> Subscriber:
        """A new subscriber, registered before its snapshot (see ``start``)."""
        sub = Subscriber(self)
        self.subscribers.add(sub)
        return sub

    def discard(self, sub: Subscriber) -> None:
        self.subscribers.discard(sub)
        self.room_changed()
        if self.pressed_by is sub:
            self.relieve()

    def deliver(self, event: HubEvent) -> list[Subscriber]:
        """Hands a live event to every subscriber; those it does not follow on
        for (a gap), and any whose merge found one, are returned to be cut off."""
        gapped, self.gapped = self.gapped, []
        for sub in self.subscribers:
            if not sub.push(event):
                gapped.append(sub)
        self.room_changed()
        return gapped

    def trimmed(self, seq: int) -> list[Subscriber]:
        """The window dropped ``seq``: the lagging subscribers whose backlog
        reaches it. One that keeps up still holds what it was handed (the
        writer waits for it before its backlog passes the window), so it is
        served whole, however large the event that pushed the rest out."""
        out = []
        for sub in self.subscribers:
            oldest = sub.oldest_seq()
            if sub.lagging and oldest is not None and oldest <= seq:
                out.append(sub)
        return out

    def overflowing(self) -> list[Subscriber]:
        """The subscribers whose backlog, apart from its newest event, is
        larger than the window (see ``Subscriber.over_window``)."""
        # Read on every write for every subscriber: the two sizes are compared
        # here, and only a backlog past one of them is looked at closer.
        count, units = self.limits
        return [
            sub
            for sub in self.subscribers
            if (len(sub._queue) - 1 > count or sub._bytes > units) and sub.over_window()
        ]

    # ---- room: a writer that waits before it writes --------------------------------

    def stall_delay(self, subs: list[Subscriber]) -> float:
        """How long ``subs`` may go without reading down before they are let go."""
        units = max((s.taking + s.backlog[1] for s in subs), default=0)
        return self.stall_timeout + units / STALL_RATE

    def room_changed(self) -> None:
        self._room.set()

    async def room(self, count: int, units: int, unread: InFlight) -> None:
        """Waits until ``count`` events of ``units`` may be written without
        pushing a subscriber that keeps up past the window (``has_room``), with
        ``unread()`` written and not yet handed out. A subscriber that makes no
        progress for the stall timeout is let go (``lagging``), as ``press``
        lets go of one: reading a message of many MiB off a shared stream may
        take longer than that, and a reader that is reading keeps up.

        A backend whose window is trimmed where this process cannot hold it
        back (a shared stream) waits here before each write: what it trims is
        then always something its readers here were handed already."""
        loop = asyncio.get_running_loop()
        deadline: float | None = None
        while True:
            extra = unread()
            blocked = [s for s in self.subscribers if not s.has_room(count, units, extra)]
            if not blocked:
                return
            # One with nothing queued waits for this process's reader of the
            # backend, not for itself: only a subscriber that has events to
            # read and does not read them stalls.
            stalled = [s for s in blocked if s.pending]
            now = loop.time()
            if not stalled:
                deadline = None
            elif deadline is None:
                deadline = now + self.stall_delay(stalled)
            elif now >= deadline:
                for sub in stalled:
                    sub.lagging = True
                continue
            self._room.clear()
            try:
                async with asyncio.timeout(None if deadline is None else deadline - now):
                    await self._room.wait()
            except TimeoutError:
                continue
            deadline = None  # progress: the stall timeout starts again

    # ---- back-pressure ---------------------------------------------------------------

    @property
    def congested(self) -> bool:
        return self.pressed_by is not None

    def press(self) -> None:
        """After a write: a subscriber that keeps up and is about to fall out of
        the window makes the writer wait for it."""
        if self.pressed_by is None:
            self._press_next()

    def _press_next(self) -> bool:
        """Makes the writer wait for the fullest subscriber that keeps up and is
        about to fall out of the window, if any (with a stall budget of its
        own); whether there was one."""
        if not self.subscribers:
            return False
        extra = self.in_flight()
        # Called after every write for every subscriber: a backlog well below
        # the high-water mark in both counts is passed over without computing
        # its level (the margin keeps rounding from ever skipping one at it).
        count, units = self.limits
        near_count = HIGH_WATER * count * 0.99 - extra[0]
        near_units = HIGH_WATER * units * 0.99 - extra[1]
        pressing = [
            s
            for s in self.subscribers
            if not s.lagging
            and (len(s._queue) >= near_count or s._bytes >= near_units)
            and s.level(extra) >= HIGH_WATER
        ]
        if not pressing:
            return False
        self.pressed_by = max(pressing, key=lambda s: s.level(extra))
        self._arm()
        return True

    def _arm(self) -> None:
        sub = self.pressed_by
        assert sub is not None
        self._armed_at = sub.received
        delay = self.stall_delay([sub])
        self._stall_timer = asyncio.get_running_loop().call_later(delay, self._stalled)

    def landed(self) -> None:
        """Writes in flight were accounted for without reaching a subscriber's
        queue (the reader was quicker than the writer's reply): the subscriber
        the writer waits for may have read down already."""
        sub = self.pressed_by
        if sub is not None and sub.level(self.in_flight()) <= LOW_WATER:
            self.relieve()

    def hold(self, future: asyncio.Future[HubEvent]) -> asyncio.Future[HubEvent]:
        """The writer's future for a write: ``future`` itself, or, while a
        subscriber presses, one that resolves after it has read down too."""
        if self.pressed_by is None:
            return future
        held: asyncio.Future[HubEvent] = asyncio.get_running_loop().create_future()
        self._held.append((future, held))
        return held

    def relieve(self) -> None:
        """The subscriber the writer waited for read down, was let go, cut off
        or left. The writer goes on only if no other subscriber that keeps up
        is about to fall out of the window: letting it write while one still
        holds a full window (such as a message larger than the window it has
        not finished reading) would push that one past the window and cut it
        off, however well it keeps up."""
        if self._stall_timer is not None:
            self._stall_timer.cancel()
            self._stall_timer = None
        self.pressed_by = None
        if self._press_next():
            return
        held, self._held = self._held, []
        for inner, outer in held:
            inner.add_done_callback(functools.partial(_settle, outer=outer))

    def _stalled(self) -> None:
        """The subscriber did not read down in time: it no longer holds the
        writer back (and is cut off once its backlog passes the window).

        Unless it has nothing queued, or was handed more since the budget
        started: it is then waiting for this process's reader of the backend
        (a message of many MiB written to a shared stream and read back, which
        counts against its share while on its way), or has a new budget for
        what it was handed, and has not stopped reading."""
        sub = self.pressed_by
        self._stall_timer = None
        if sub is not None and (not sub.pending or sub.received != self._armed_at):
            self._arm()
            return
        if sub is not None:
            sub.lagging = True
        self.relieve()

    def end(self) -> None:
        """The log closed: every subscriber's ``next`` returns None."""
        for sub in list(self.subscribers):
            sub.end()
        self.subscribers.clear()
        self.room_changed()
        self.relieve()

    def fail(self, error: BaseException) -> None:
        """The backend was lost: every subscriber's ``next`` raises ``error``."""
        for sub in list(self.subscribers):
            sub.fail(error)
        self.subscribers.clear()
        self.room_changed()
        self.relieve()


def _settle(inner: asyncio.Future[HubEvent], outer: asyncio.Future[HubEvent]) -> None:
    if outer.done():
        return
    if inner.cancelled():
        outer.cancel()
    elif (error := inner.exception()) is not None:
        outer.set_exception(error)
    else:
        outer.set_result(inner.result())
