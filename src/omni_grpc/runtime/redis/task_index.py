"""The task index on Redis: one hash per run, and sorted sets per scope
(all runs, one state, one session, one session's runs in one state), scored by
when each run's state last changed; see ``scripts.TASK_PUT``."""

from __future__ import annotations

from typing import Any

from omni_grpc.runtime.redis import scripts
from omni_grpc.runtime.redis.connection import RedisConnection, unavailable_on_failure
from omni_grpc.runtime.task_index import TaskRecord, instant

_OPTIONAL = ("first_record", "last_record", "message_id", "reason")


def _decode(raw: dict[bytes, bytes]) -> TaskRecord:
    text = {k.decode(): v.decode() for k, v in raw.items()}
    return TaskRecord(
        session_id=text["session_id"],
        event_id=text["event_id"],
        state=text["state"],
        started_at=text["started_at"],
        updated_at=text["updated_at"],
        last_event_id=text["last_event_id"],
        first_record=int(text["first_record"]) if "first_record" in text else None,
        last_record=int(text["last_record"]) if "last_record" in text else None,
        message_id=text.get("message_id"),
        reason=text.get("reason"),
    )


class RedisTaskIndex:
    def __init__(self, conn: RedisConnection) -> None:
        self._conn = conn
        self._put = conn.commands.register_script(scripts.TASK_PUT)
        self._remove = conn.commands.register_script(scripts.TASK_REMOVE_SESSION)

    def _key(self, member: str) -> str:
        return self._conn.global_key(f"task:{member}")

    def _set(self, session_id: str | None, state: str | None) -> str:
        scope = "tasks" if session_id is None else f"tasks:ctx:{session_id}"
        return self._conn.global_key(scope if state is None else f"{scope}:state:{state}")

    async def put(self, record: TaskRecord) -> None:
        fields: list[Any] = [
            "session_id", record.session_id,
            "event_id", record.event_id,
            "started_at", record.started_at,
            "updated_at", record.updated_at,
            "last_event_id", record.last_event_id,
        ]  # fmt: skip
        for name in _OPTIONAL:
            value = getattr(record, name)
            if value is not None:
                fields += [name, value]
        with unavailable_on_failure():
            await self._put(
                keys=[self._key(record.key)],
                args=[
                    self._conn.prefix,
                    record.session_id,
                    record.key,
                    repr(instant(record.updated_at)),
                    record.state,
                    *fields,
                ],
            )

    async def get(self, session_id: str, event_id: str) -> TaskRecord | None:
        with unavailable_on_failure():
            raw = await self._conn.reads.hgetall(self._key(f"{session_id}:{event_id}"))
        return _decode(raw) if raw else None

    async def page(
        self,
        *,
        session_id: str | None = None,
        state: str | None = None,
        updated_after: float | None = None,
        offset: int = 0,
        limit: int = 50,
    ) -> tuple[list[TaskRecord], int]:
        key = self._set(session_id, state)
        low = "-inf" if updated_after is None else f"({updated_after!r}"
        with unavailable_on_failure():
            members = await self._conn.reads.zrevrangebyscore(
                key, "+inf", low, start=offset, num=limit
            )
            total = await self._conn.reads.zcount(key, low, "+inf")
            pipe = self._conn.reads.pipeline(transaction=False)
            for member in members:
                pipe.hgetall(self._key(member.decode()))
            found = await pipe.execute() if members else []
        # A run whose session was deleted between the two reads is left out.
        return [_decode(raw) for raw in found if raw], int(total)

    async def remove_session(self, session_id: str) -> None:
        with unavailable_on_failure():
            await self._remove(keys=[], args=[self._conn.prefix, session_id])
