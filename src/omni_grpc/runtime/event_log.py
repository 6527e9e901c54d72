"""The event log: a session's ids, replay window and live fan-out.

Two backends implement it: the in-process ring buffer (``memory_log``, the
default) and Redis Streams (``omni_grpc.runtime.redis``), which lets any
replica serve any session. Nothing here depends on in-process object identity:
an event is named by its ``<epoch>-<seq>`` id, and replay is decided from the
id alone.

Semantics (the reference server's SSE channel):

* ``publish`` gives the next seq, keeps the event in the replay window and
  sends it to every subscriber.
* A unicast event (the ``initial`` events of ``subscribe``, and
  ``resync_required``) consumes a seq but is not kept, so kept ids have gaps.
* A message body with a record number (``EventBody.record``, the trace's
  number for it) is refused (``RecordOutOfOrder``, nothing kept) unless it
  follows the log's last record number; the first numbered record of a log
  (a new log, or one written by 0.3, whose events carry no number) is taken
  as it is. ``publish_many`` takes all of its bodies or none.
* ``replay_after(id)`` hits iff the epoch is this log's and
  ``last_evicted_seq <= seq < next_seq``; it returns the kept events after
  ``seq``. Anything else (foreign epoch, malformed id, evicted seq) misses.
* ``subscribe`` is atomic: no event is published between the replayed gap,
  the initial events and the first live event, so a subscriber sees strictly
  increasing seqs with no hole a reconnect could fall into.
* A subscriber that keeps up is never cut off by a writer in its process:
  when its queue nears the window, a writer that waits on ``congested`` waits
  for it. One that really falls behind (does not read down within a stall
  timeout) no longer holds the writer back, and is cut off (its queue
  dropped) and told ``resync_required`` once the window moves past it; it
  then keeps receiving live events.
* Every subscriber checks that each kept event follows on from the last one
  it was given: an event after a gap is never handed out silently, the
  subscriber is cut off as above instead. The ``resync_required``'s own id is
  where it goes on from (history covers what it missed).

Both backends serve their subscribers through one fan-out
(``runtime/fanout.py``); a backend appends, replays, reports its window and
hands the fan-out each event in log order.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from omni_grpc.runtime.events import EventBody, HubEvent


@dataclass(frozen=True)
class ReplayWindow:
    """How much of a session's log stays replayable (the reference channel's
    limits). Sizes are UTF-16 code units of the JSON text, as the reference
    counts them; the newest event is always kept, however large."""

    max_events: int = 10_000
    max_bytes: int = 8 * 1024 * 1024

    def __post_init__(self) -> None:
        if self.max_events < 1 or self.max_bytes < 1:
            raise ValueError("the replay window needs at least one event and one byte")


# The events a new subscriber gets after its replay (task state, pending
# approvals), or a function building them. A log may call it more than once:
# it must describe the session as of the call, and the log only keeps a result
# no publish has overtaken.
InitialEvents = Callable[[], Awaitable[Sequence[EventBody]]] | Sequence[EventBody]


class Subscription(Protocol):
    """One subscriber's ordered view: replayed gap, initial events, then live."""

    def __aiter__(self) -> AsyncIterator[HubEvent]: ...

    async def next(self) -> HubEvent | None:
        """The next event, waiting for one; None once the subscription is closed.

        Raises ``LogUnavailable`` when the backend was lost mid-stream."""
        ...

    def close(self) -> None:
        """Stops delivery and releases the queue (idempotent)."""
        ...

    def observe(self, observer: Callable[[HubEvent], None]) -> None:
        """``observer`` is called with each event this subscription hands out."""
        ...


class EventLog(Protocol):
    """One session's log, as this process sees it."""

    @property
    def subscriber_count(self) -> int:
        """Open subscriptions served by this process."""
        ...

    async def last_event_id(self) -> str | None:
        """The newest id given out (kept or unicast), None before the first."""
        ...

    async def last_record(self) -> int | None:
        """The record number of the newest numbered record the log took (kept
        after its event leaves the window), None before the first."""
        ...

    async def publish(
        self, body: EventBody, *, fence: int | None = None, end_run: bool = False
    ) -> HubEvent:
        """Keeps ``body`` and sends it to every subscriber.

        ``fence`` is the run lease's token: a shared backend refuses the write
        (raising ``Fenced``) once another holder has taken the session over.
        ``end_run`` marks the run's last event (``task_state idle``): the lease
        held with ``fence`` is released in the same atomic step, so the session
        takes new runs exactly when its subscribers are told it is idle."""
        ...

    def publish_nowait(
        self, body: EventBody, *, fence: int | None = None, end_run: bool = False
    ) -> asyncio.Future[HubEvent]:
        """``publish`` without waiting: queued in call order (ahead of any later
        ``publish``), the future resolves once the event is in the log, or with
        the error. A producer that keeps writing without waiting lets a backend
        with round trips send many events in one."""
        ...

    def forgive(self, fence: int | None) -> None:
        """Once a write with ``fence`` failed, later ones with it are refused (a
        hole in the middle of the log would go unnoticed); this lets them through
        again, for the run's close, which records what was lost."""
        ...

    @property
    def congested(self) -> bool:
        """The writer should wait for its last ``publish_nowait`` before writing
        more: the backend is behind (queued writes), or a subscriber that keeps
        up is about to fall out of the window (back-pressure)."""
        ...

    async def publish_many(
        self, items: Sequence[EventBody], *, fence: int | None = None
    ) -> list[HubEvent]:
        """``publish`` for several bodies in order, in one round trip where the
        backend has round trips. A record number out of order refuses the
        whole batch."""
        ...

    async def replay_after(self, event_id: str) -> list[HubEvent] | None:
        """The kept events after ``event_id``, or None on a miss."""
        ...

    async def window(self) -> list[HubEvent]:
        """Every event still kept, oldest first (the live tail is folded from it)."""
        ...

    async def subscribe(
        self, after_event_id: str | None = None, initial: InitialEvents | None = None
    ) -> Subscription:
        """Atomically: replay after ``after_event_id`` (or send ``resync_required``
        on a miss), then send ``initial()`` to this subscriber only, then go
        live. With no ``after_event_id`` nothing is replayed."""
        ...

    async def close(self) -> None:
        """Ends this process's subscriptions (their ``next`` returns None)."""
        ...


class EventLogs(Protocol):
    """Where the hub gets each session's log; also decides when to drop one."""

    def get(self, session_id: str) -> EventLog:
        """The session's log, created on first use."""
        ...

    def observe(self, wrap: Callable[[EventLog], EventLog]) -> None:
        """Logs created from now on are handed out wrapped (metrics count them)."""
        ...

    async def last_event_id(self, session_id: str) -> str | None:
        """The session's newest id, without creating its log."""
        ...

    def hold(self, session_id: str) -> None:
        """A run uses the log: do not reclaim it until ``release``."""
        ...

    def release(self, session_id: str) -> None: ...

    def watched(self) -> list[str]:
        """The sessions with a subscriber in this process."""
        ...

    async def drop(self, session_id: str) -> None:
        """The session was deleted: its subscriptions in this process end (their
        ``next`` returns None), its buffer is freed, and what a shared backend
        stores of its events is removed."""
        ...

    def reclaim_idle(self) -> int:
        """Drops logs idle, unwatched and not held for the idle TTL; how many."""
        ...

    async def close(self) -> None:
        """Ends every subscription of every log."""
        ...


_Log = TypeVar("_Log", bound=EventLog)


class LogRegistry(Generic[_Log]):
    """What every :class:`EventLogs` shares: one log per session made on first
    use, handed out wrapped by the observer, held by runs, reclaimed when idle.
    A backend says how a log is made and when an unheld one counts as idle."""

    def __init__(self, idle_ttl: float) -> None:
        self.idle_ttl = idle_ttl
        self._logs: dict[str, _Log] = {}
        # What get() hands out: each log, wrapped by the observer if there is one.
        self._handed: dict[str, EventLog] = {}
        self._wrap: Callable[[EventLog], EventLog] | None = None
        self._held: dict[str, int] = {}

    def _create(self, session_id: str) -> _Log:
        raise NotImplementedError

    def _is_idle(self, log: _Log) -> bool:
        raise NotImplementedError

    def _released(self, log: _Log) -> None:
        """The last run holding ``log`` let it go."""

    def get(self, session_id: str) -> EventLog:
        handed = self._handed.get(session_id)
        if handed is not None:
            return handed
        log = self._logs.get(session_id)
        if log is None:
            log = self._logs[session_id] = self._create(session_id)
        handed = self._handed[session_id] = self._wrap(log) if self._wrap else log
        return handed

    def observe(self, wrap: Callable[[EventLog], EventLog]) -> None:
        self._wrap = wrap

    def hold(self, session_id: str) -> None:
        self._held[session_id] = self._held.get(session_id, 0) + 1

    def release(self, session_id: str) -> None:
        left = self._held.get(session_id, 0) - 1
        if left > 0:
            self._held[session_id] = left
            return
        self._held.pop(session_id, None)
        log = self._logs.get(session_id)
        if log is not None:
            self._released(log)

    def reclaim_idle(self) -> int:
        idle = [
            sid
            for sid, log in self._logs.items()
            if sid not in self._held and log.subscriber_count == 0 and self._is_idle(log)
        ]
        for sid in idle:
            del self._logs[sid]
            self._handed.pop(sid, None)
        return len(idle)

    def watched(self) -> list[str]:
        """The sessions with a subscriber in this process."""
        return [sid for sid, log in self._logs.items() if log.subscriber_count]

    async def drop(self, session_id: str) -> None:
        log = self._logs.pop(session_id, None)
        self._handed.pop(session_id, None)
        self._held.pop(session_id, None)
        if log is not None:
            await log.close()
        await self._discard(session_id)

    async def _discard(self, session_id: str) -> None:
        """Removes what the backend keeps of a deleted session's events
        beyond this process (nothing, in memory)."""

    async def close(self) -> None:
        for log in list(self._logs.values()):
            await log.close()


async def initial_bodies(initial: InitialEvents | None) -> Sequence[EventBody]:
    if initial is None:
        return ()
    if callable(initial):
        return await initial()
    return initial
