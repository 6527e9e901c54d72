"""The control channel on Redis: one inbox stream per replica.

A replica reads its own inbox with one blocking reader, from the start (the
inbox is new with every process: its id is random). Inboxes expire an hour
after their last command, so those of replicas that died go away.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import orjson

from omni_grpc.runtime.control_channel import Command, CommandHandler
from omni_grpc.runtime.errors import BackendUnavailable
from omni_grpc.runtime.redis.connection import BLOCK_MS, RedisConnection, unavailable_on_failure

log = logging.getLogger(__name__)

_INBOX_TTL_MS = 3600 * 1000
_INBOX_MAX = 10_000


class RedisControlChannel:
    def __init__(self, conn: RedisConnection) -> None:
        self._conn = conn
        self._readers: list[asyncio.Task[None]] = []

    def _inbox(self, replica: str) -> str:
        return self._conn.global_key(f"inbox:{replica}")

    async def listen(self, replica: str, handler: CommandHandler) -> None:
        task = asyncio.create_task(self._read(self._inbox(replica), handler))
        self._readers.append(task)

    async def _read(self, inbox: str, handler: CommandHandler) -> None:
        position = "0-0"
        delay = 0.2
        down = False
        while True:
            try:
                with unavailable_on_failure():
                    response = await self._conn.blocking.xread(
                        {inbox: position}, block=BLOCK_MS, count=100
                    )
                if down:
                    log.warning("control inbox reachable again")
                down, delay = False, 0.2
            except BackendUnavailable as exc:
                if not down:  # once per outage; health says the rest
                    log.warning("control inbox unreachable (retrying): %s", exc)
                down = True
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
                continue
            for _key, entries in response or []:
                for entry_id, fields in entries:
                    position = entry_id.decode()
                    try:
                        handler(Command(**orjson.loads(fields[b"c"])))
                    except Exception:
                        log.exception("a control command failed")

    async def send(self, owner: str, command: Command) -> None:
        payload = orjson.dumps(
            {
                "session_id": command.session_id,
                "kind": command.kind,
                "token": command.token,
                "reason": command.reason,
                "abort_kind": command.abort_kind,
                "tool_call_id": command.tool_call_id,
                "decision": command.decision,
            }
        )
        inbox = self._inbox(owner)
        with unavailable_on_failure():
            pipe = self._conn.commands.pipeline(transaction=False)
            pipe.xadd(inbox, {"c": payload}, maxlen=_INBOX_MAX, approximate=True)
            pipe.pexpire(inbox, _INBOX_TTL_MS)
            await pipe.execute()

    async def close(self) -> None:
        for task in self._readers:
            task.cancel()
        for task in self._readers:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._readers.clear()
