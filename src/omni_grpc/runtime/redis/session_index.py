"""The session index on Redis: one hash per session and a set of all ids.

Every write is a script that checks the record's lifecycle first
(``scripts._LIFECYCLE``), so none can revive a deleted session as a hash of
a field or two; the run lease's claim reads the same field in its own script
(``record_key``).
"""

from __future__ import annotations

from typing import Any

import orjson

from omni_grpc.runtime.errors import LimitExceeded
from omni_grpc.runtime.redis import scripts
from omni_grpc.runtime.redis.connection import RedisConnection, unavailable_on_failure
from omni_grpc.runtime.session_index import SessionRecord
from omni_grpc.vocabulary import SessionLifecycle


def record_key(conn: RedisConnection, session_id: str) -> str:
    """The hash that is the session's record."""
    return conn.global_key(f"session:{session_id}")


def _decode(session_id: str, raw: dict[bytes, bytes]) -> SessionRecord | None:
    if b"created_at" not in raw:
        # A hash a version before the lifecycle scripts left behind: only a
        # late count of a deleted session, not a record.
        return None
    meta = raw.get(b"meta")
    unclosed = raw.get(b"unclosed")
    return SessionRecord(
        session_id=session_id,
        created_at=raw[b"created_at"].decode(),
        updated_at=raw[b"updated_at"].decode(),
        message_count=int(raw[b"count"]),
        shards=tuple(orjson.loads(raw[b"shards"])),
        meta=orjson.loads(meta) if meta else None,
        unclosed=unclosed.decode() if unclosed else None,
        approval_mode=mode.decode() if (mode := raw.get(b"approval_mode")) else None,
        # Written before there were lifecycles: live.
        lifecycle=SessionLifecycle(state.decode() if (state := raw.get(b"state")) else "live"),
    )


class RedisSessionIndex:
    def __init__(self, conn: RedisConnection) -> None:
        self._conn = conn
        self._all = conn.global_key("sessions")
        self._add = conn.commands.register_script(scripts.INDEX_ADD)
        self._set = conn.commands.register_script(scripts.INDEX_SET)
        self._recorded = conn.commands.register_script(scripts.INDEX_RECORDED)
        self._advance = conn.commands.register_script(scripts.INDEX_ADVANCE)

    def _key(self, session_id: str) -> str:
        return record_key(self._conn, session_id)

    async def add(self, record: SessionRecord, *, limit: int | None = None) -> bool:
        fields: list[Any] = [
            "created_at", record.created_at,
            "updated_at", record.updated_at,
            "count", record.message_count,
            "shards", orjson.dumps(list(record.shards)),
            "state", record.lifecycle.value,
        ]  # fmt: skip
        if record.meta is not None:
            fields += ["meta", orjson.dumps(record.meta)]
        if record.unclosed is not None:
            fields += ["unclosed", record.unclosed]
        if record.approval_mode is not None:
            fields += ["approval_mode", record.approval_mode]
        with unavailable_on_failure():
            added = await self._add(
                keys=[self._key(record.session_id), self._all],
                args=[record.session_id, limit or 0, *fields],
            )
        if int(added) < 0:
            assert limit is not None
            raise LimitExceeded("max_sessions", limit)
        return bool(int(added))

    async def get(self, session_id: str) -> SessionRecord | None:
        with unavailable_on_failure():
            raw = await self._conn.reads.hgetall(self._key(session_id))
        return _decode(session_id, raw)

    async def list(self) -> list[SessionRecord]:
        with unavailable_on_failure():
            ids = sorted(m.decode() for m in await self._conn.reads.smembers(self._all))
            pipe = self._conn.reads.pipeline(transaction=False)
            for sid in ids:
                pipe.hgetall(self._key(sid))
            found = await pipe.execute() if ids else []
        records = [_decode(sid, raw) for sid, raw in zip(ids, found, strict=True)]
        live = [r for r in records if r is not None and r.lifecycle is SessionLifecycle.LIVE]
        return sorted(live, key=lambda r: (r.created_at, r.session_id))

    async def advance(
        self, session_id: str, before: SessionLifecycle, after: SessionLifecycle
    ) -> bool:
        with unavailable_on_failure():
            moved = await self._advance(
                keys=[self._key(session_id), self._all], args=[session_id, before, after]
            )
        return bool(int(moved))

    async def remove(self, session_id: str) -> bool:
        with unavailable_on_failure():
            pipe = self._conn.commands.pipeline(transaction=True)
            pipe.srem(self._all, session_id)
            pipe.delete(self._key(session_id))
            removed, _ = await pipe.execute()
        return bool(removed)

    async def recorded(self, session_id: str, message_count: int, updated_at: str) -> None:
        with unavailable_on_failure():
            await self._recorded(keys=[self._key(session_id)], args=[message_count, updated_at])

    async def mark_unclosed(self, session_id: str, reason: str | None) -> None:
        if reason is None:
            with unavailable_on_failure():
                await self._conn.commands.hdel(self._key(session_id), "unclosed")
        else:
            await self._set_fields(session_id, "unclosed", reason)

    async def set_approval_mode(self, session_id: str, mode: str) -> bool:
        return await self._set_fields(session_id, "approval_mode", mode)

    async def _set_fields(self, session_id: str, *pairs: str | int) -> bool:
        """Sets fields of the session's record if it exists (``INDEX_SET``)."""
        with unavailable_on_failure():
            done = await self._set(keys=[self._key(session_id)], args=list(pairs))
        return bool(int(done))
