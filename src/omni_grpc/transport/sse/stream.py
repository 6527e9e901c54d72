"""Hub events as reference SSE frames, with the heartbeat."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator

from omni_grpc.runtime.errors import BackendUnavailable
from omni_grpc.runtime.interface import HubEvent, Subscription
from omni_grpc.transport.sse.wire import (
    DEFAULT_HEARTBEAT_SECONDS,
    PING,
    SERVER_EVENT,
    frame_parts,
)


async def paced(
    subscription: Subscription, heartbeat: float | None = DEFAULT_HEARTBEAT_SECONDS
) -> AsyncGenerator[HubEvent | None, None]:
    """A subscription's events, with ``None`` whenever a heartbeat is due: every
    ``heartbeat`` seconds from the start, busy or not, as the reference's timer.

    Ends when the subscription closes, or when the backend behind it is lost
    (the client reconnects with ``Last-Event-ID``); closing this generator
    closes the subscription.
    """
    loop = asyncio.get_running_loop()
    next_ping = loop.time() + heartbeat if heartbeat else None
    try:
        while True:
            try:
                if next_ping is None:
                    event = await subscription.next()
                else:
                    try:
                        async with asyncio.timeout_at(next_ping):
                            event = await subscription.next()
                    except TimeoutError:
                        next_ping += heartbeat or 0.0
                        yield None
                        continue
            except BackendUnavailable:
                return
            if event is None:
                return
            yield event
            if next_ping is not None and loop.time() >= next_ping:
                next_ping += heartbeat or 0.0
                yield None
    finally:
        subscription.close()


async def event_frames(
    subscription: Subscription, *, heartbeat: float | None = DEFAULT_HEARTBEAT_SECONDS
) -> AsyncGenerator[bytes, None]:
    """The reference stream: one frame per event, ``: ping`` as the heartbeat.

    A frame with a large payload comes in pieces (``wire.frame_parts``), its
    payload being the event's own bytes, shared by every reader.
    """
    events = paced(subscription, heartbeat)
    try:
        async for event in events:
            if event is None:
                yield PING
                continue
            # Messages go unnamed; control events as ``event: server_event``.
            name = None if event.body.is_message else SERVER_EVENT  # nothing decoded to tell
            for part in frame_parts(event.data, event_id=event.event_id, event=name):
                yield part
    finally:
        await events.aclose()
