"""Hub events as reference SSE frames, with the heartbeat."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator

from omni_grpc.runtime.event_log import Subscription
from omni_grpc.runtime.events import HubEvent
from omni_grpc.transport.sse.wire import (
    DEFAULT_HEARTBEAT_SECONDS,
    PING,
    SERVER_EVENT,
    encode_frame,
)


def frame_for(event: HubEvent) -> bytes:
    """Messages go unnamed; control events as ``event: server_event``."""
    name = SERVER_EVENT if event.server_event is not None else None
    return encode_frame(event.data, event_id=event.event_id, event=name)


async def event_frames(
    subscription: Subscription, *, heartbeat: float | None = DEFAULT_HEARTBEAT_SECONDS
) -> AsyncGenerator[bytes, None]:
    """A subscription's frames, with ``: ping`` on a fixed cadence as the
    reference does (every ``heartbeat`` seconds from the connect, busy or not).

    Ends when the subscription closes; closing this generator closes the
    subscription.
    """
    loop = asyncio.get_running_loop()
    next_ping = loop.time() + heartbeat if heartbeat else None
    try:
        while True:
            if next_ping is None:
                event = await subscription.next()
            else:
                try:
                    async with asyncio.timeout_at(next_ping):
                        event = await subscription.next()
                except TimeoutError:
                    next_ping += heartbeat or 0.0
                    yield PING
                    continue
            if event is None:
                return
            yield frame_for(event)
            if next_ping is not None and loop.time() >= next_ping:
                next_ping += heartbeat or 0.0
                yield PING
    finally:
        subscription.close()
