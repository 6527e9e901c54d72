"""The event log interface: a session's ids, replay buffer and live fan-out.

A backend other than the in-memory ring buffer (for example Redis Streams, so
several replicas can serve one session's Attach) implements these two
protocols. Nothing here depends on in-process object identity: an event is
named by its ``<epoch>-<seq>`` id, and replay is decided from the id alone.

Semantics (the reference server's SSE channel):

* ``publish`` gives the next seq, buffers the event and sends it to every
  subscriber.
* A unicast event (``initial`` in ``subscribe``, and ``resync_required``)
  consumes a seq but is not buffered, so buffered ids have gaps.
* ``replay_after(id)`` hits iff the epoch is this log's and
  ``last_evicted_seq <= seq < next_seq``; it returns the buffered events after
  ``seq``. Anything else (foreign epoch, malformed id, evicted seq) misses.
* A subscriber never slows the publisher: it has a bounded queue, and one that
  falls behind the buffer is cut off (its queue dropped) and told
  ``resync_required``; it then keeps receiving live events.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Protocol

from omni_grpc.runtime.events import EventBody, HubEvent


class Subscription(Protocol):
    """One subscriber's ordered view: replayed gap, initial events, then live."""

    def __aiter__(self) -> AsyncIterator[HubEvent]: ...

    async def next(self) -> HubEvent | None:
        """The next event, waiting for one; None once the subscription is closed."""
        ...

    def close(self) -> None:
        """Stops delivery and releases the queue (idempotent)."""
        ...


class EventLog(Protocol):
    @property
    def epoch(self) -> str:
        """8 hex chars, fixed for this log instance."""
        ...

    @property
    def last_event_id(self) -> str | None:
        """The newest id given out (buffered or unicast), None before the first."""
        ...

    @property
    def subscriber_count(self) -> int:
        """Open subscriptions (served by this process)."""
        ...

    async def publish(self, body: EventBody) -> HubEvent:
        """Buffers ``body`` and sends it to every subscriber."""
        ...

    async def replay_after(self, event_id: str) -> list[HubEvent] | None:
        """The buffered events after ``event_id``, or None on a miss."""
        ...

    async def subscribe(
        self, after_event_id: str | None = None, initial: Sequence[EventBody] = ()
    ) -> Subscription:
        """Atomically: replay after ``after_event_id`` (or send ``resync_required``
        on a miss), then send ``initial`` to this subscriber only, then go live.
        With no ``after_event_id`` nothing is replayed."""
        ...

    async def close(self) -> None:
        """Ends every subscription (their ``next`` returns None)."""
        ...
