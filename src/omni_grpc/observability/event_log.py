"""An event log wrapper that counts what passes through it, for any backend.

Counting happens on the ``EventLog`` protocol, not inside one implementation,
so the in-memory ring and a shared backend are measured the same way. A
replay hit or miss, and a cut-off, are read from what the subscriber is
given: the protocol answers a missed replay, and a subscriber that fell
behind, with ``resync_required``. (A resuming subscriber cut off before it
read its first event counts as a miss: it resumed nothing.)
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from omni_grpc.observability.metrics import ServerMetrics
from omni_grpc.runtime.bodies import is_resync
from omni_grpc.runtime.event_log import EventLog, InitialEvents, Subscription
from omni_grpc.runtime.events import EventBody, HubEvent


class DeliveryCounter:
    """Counts what one subscriber is handed (an observer of its fan-out queue)."""

    def __init__(self, metrics: ServerMetrics, resuming: bool) -> None:
        self._delivered = metrics.events_delivered
        self._metrics = metrics
        # Until the first event: whether this subscriber asked to resume.
        self._first = resuming

    def __call__(self, event: HubEvent) -> None:
        self._delivered.value += 1
        first, self._first = self._first, False
        if first or not event.buffered:  # resync_required is never buffered
            self._classify(event, first)

    def _classify(self, event: HubEvent, first: bool) -> None:
        if first:  # the subscriber gave an event id: its first event says hit or miss
            self._metrics.replays.labels("miss" if is_resync(event) else "hit").inc()
        elif is_resync(event):
            self._metrics.subscriber_cutoffs.inc()


class ObservedEventLog:
    """Wraps ``inner``; each published event and each delivery is counted."""

    def __init__(self, inner: EventLog, metrics: ServerMetrics) -> None:
        self._inner = inner
        self._metrics = metrics
        self._published = metrics.events_published

    @property
    def inner(self) -> EventLog:
        return self._inner

    async def last_event_id(self) -> str | None:
        return await self._inner.last_event_id()

    @property
    def subscriber_count(self) -> int:
        return self._inner.subscriber_count

    async def last_record(self) -> int | None:
        return await self._inner.last_record()

    def buffer_stats(self) -> tuple[int, int] | None:
        stats = getattr(self._inner, "buffer_stats", None)
        return stats() if callable(stats) else None

    async def publish(
        self, body: EventBody, *, fence: int | None = None, end_run: bool = False
    ) -> HubEvent:
        event = await self._inner.publish(body, fence=fence, end_run=end_run)
        self._published.value += 1
        return event

    def publish_nowait(
        self, body: EventBody, *, fence: int | None = None, end_run: bool = False
    ) -> asyncio.Future[HubEvent]:
        future = self._inner.publish_nowait(body, fence=fence, end_run=end_run)
        self._published.value += 1
        return future

    def forgive(self, fence: int | None) -> None:
        self._inner.forgive(fence)

    @property
    def congested(self) -> bool:
        return self._inner.congested

    async def publish_many(
        self, items: Sequence[EventBody], *, fence: int | None = None
    ) -> list[HubEvent]:
        events = await self._inner.publish_many(items, fence=fence)
        self._published.value += len(events)
        return events

    async def replay_after(self, event_id: str) -> list[HubEvent] | None:
        return await self._inner.replay_after(event_id)

    async def window(self) -> list[HubEvent]:
        return await self._inner.window()

    async def subscribe(
        self, after_event_id: str | None = None, initial: InitialEvents | None = None
    ) -> Subscription:
        sub = await self._inner.subscribe(after_event_id, initial)
        sub.observe(DeliveryCounter(self._metrics, resuming=bool(after_event_id)))
        return sub

    async def close(self) -> None:
        await self._inner.close()

    def __getattr__(self, name: str) -> Any:
        # Backend extras (stats, tuning) stay reachable through the wrapper.
        return getattr(self._inner, name)
