"""Pending approvals on Redis: a hash per session, tool_call_id -> request."""

from __future__ import annotations

import time

from omni_grpc.convert import parse_server_event
from omni_grpc.runtime.events import EventBody
from omni_grpc.runtime.redis.connection import RedisConnection, unavailable_on_failure


class RedisPendingApprovals:
    def __init__(self, conn: RedisConnection) -> None:
        self._conn = conn

    def _key(self, session_id: str) -> str:
        return self._conn.session_key(session_id, "asks")

    async def add(self, session_id: str, tool_call_id: str, request: EventBody) -> None:
        # Prefixed with the time it was asked, so a listing keeps ask order.
        value = b"%d|" % time.time_ns() + request.data
        with unavailable_on_failure():
            await self._conn.commands.hset(self._key(session_id), tool_call_id, value)

    async def take(self, session_id: str, tool_call_id: str) -> bool:
        with unavailable_on_failure():
            return bool(await self._conn.commands.hdel(self._key(session_id), tool_call_id))

    async def list(self, session_id: str) -> list[EventBody]:
        with unavailable_on_failure():
            raw = await self._conn.reads.hgetall(self._key(session_id))
        asks = sorted(value.split(b"|", 1) for value in raw.values())
        return [EventBody(None, parse_server_event(data), data) for _, data in asks]

    async def clear(self, session_id: str) -> None:
        with unavailable_on_failure():
            await self._conn.commands.delete(self._key(session_id))
