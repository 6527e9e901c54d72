"""Pending approvals on Redis: a hash per session, tool_call_id -> request."""

from __future__ import annotations

import time

from omni_grpc.convert import parse_server_event
from omni_grpc.runtime.events import EventBody
from omni_grpc.runtime.redis import scripts
from omni_grpc.runtime.redis.connection import RedisConnection, unavailable_on_failure


class RedisPendingApprovals:
    def __init__(self, conn: RedisConnection) -> None:
        self._conn = conn
        self._take = conn.commands.register_script(scripts.APPROVAL_TAKE)
        self._expire = conn.commands.register_script(scripts.APPROVAL_EXPIRE)

    def _key(self, session_id: str) -> str:
        return self._conn.session_key(session_id, "asks")

    async def add(self, session_id: str, tool_call_id: str, request: EventBody) -> None:
        # Prefixed with the time it was asked, so a listing keeps ask order.
        value = b"%d|" % time.time_ns() + request.data
        with unavailable_on_failure():
            await self._conn.commands.hset(self._key(session_id), tool_call_id, value)

    def _keys(self, session_id: str) -> list[str]:
        return [self._key(session_id), self._conn.session_key(session_id, "decided")]

    async def take(self, session_id: str, tool_call_id: str, decision: str | None = None) -> bool:
        with unavailable_on_failure():
            taken = await self._take(
                keys=self._keys(session_id), args=[tool_call_id, decision or ""]
            )
        return bool(int(taken))

    async def expire(self, session_id: str, tool_call_id: str) -> str | None:
        with unavailable_on_failure():
            decision = await self._expire(keys=self._keys(session_id), args=[tool_call_id])
        return None if decision is None else bytes(decision).decode()

    async def list(self, session_id: str) -> list[EventBody]:
        with unavailable_on_failure():
            raw = await self._conn.reads.hgetall(self._key(session_id))
        asks = sorted(value.split(b"|", 1) for value in raw.values())
        return [EventBody(None, parse_server_event(data), data) for _, data in asks]

    async def clear(self, session_id: str) -> None:
        with unavailable_on_failure():
            await self._conn.commands.delete(*self._keys(session_id))
