"""One blocking reader per replica for every session stream watched here.

A session's stream is watched while this replica has subscribers of it (see
``event_log.py``). The reader sends one ``XREAD BLOCK`` over all of them and
hands each stream's new entries to its log, in order, so the connections a
replica holds do not grow with its sessions: one serves every stream. A
stream stops being watched at the first read after its last subscriber left
(nothing stays blocked on behalf of a finished session).

A stream first watched while the read is blocked would wait for the block
to end; an entry on the reader's own wake stream, read with the rest, ends
it at once. The wake stream's name is new with every process, so it is read
from its start, and it expires an hour after its last entry.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from dataclasses import dataclass
from typing import Any, Protocol

from redis import exceptions as redis_errors

from omni_grpc.runtime.errors import BackendUnavailable
from omni_grpc.runtime.redis.connection import (
    BLOCK_MS,
    RedisConnection,
    one_per_connection,
    unavailable_on_failure,
)

log = logging.getLogger(__name__)

_WAKE_TTL_MS = 3600 * 1000
# Entries of one stream handed over per read (a longer backlog takes more reads).
_COUNT = 1000
# Watched streams are kept from expiring at least this often (seconds).
_KEEP_ALIVE_EVERY = 60.0


class Watch(Protocol):
    """What the reader needs of a stream's log."""

    def wanted(self) -> bool:
        """Whether the stream still has subscribers in this replica."""
        ...

    async def entries(self, entries: list[Any]) -> None:
        """New entries, oldest first, as ``XREAD`` returns them."""
        ...

    def released(self) -> None:
        """The stream is no longer read for this log (no subscriber is left)."""
        ...

    def lost(self, error: BackendUnavailable) -> None:
        """Reading failed: the log's subscribers are told."""
        ...

    def keep_alive(self) -> tuple[list[str], int]:
        """The keys a watched log keeps from expiring, and their TTL in ms."""
        ...


@dataclass
class _Watched:
    watch: Watch
    position: str


class StreamReader:
    def __init__(self, conn: RedisConnection) -> None:
        self._conn = conn
        self._wake = conn.global_key(f"wake:{secrets.token_hex(6)}")
        self._wake_at = "0-0"
        self._watched: dict[str, _Watched] = {}
        self._task: asyncio.Task[None] | None = None
        self._blocked = False
        self._kept_alive = time.monotonic()
        # How often the watched logs need keeping alive (a third of the
        # shortest TTL seen): known without asking every log after every read,
        # which cost a replica with hundreds of watched logs 3 % of its CPU.
        self._keep_every = _KEEP_ALIVE_EVERY

    def __len__(self) -> int:
        return len(self._watched)

    async def watch(self, key: str, position: str, watch: Watch) -> None:
        """Reads ``key`` after ``position`` for ``watch`` until it is not wanted."""
        self._watched[key] = _Watched(watch, position)
        _, ttl_ms = watch.keep_alive()
        self._keep_every = min(self._keep_every, ttl_ms / 3000)
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="omni-redis-streams")
        elif self._blocked:
            await self._wake_up()

    def unwatch(self, key: str, watch: Watch) -> None:
        watched = self._watched.get(key)
        if watched is not None and watched.watch is watch:
            del self._watched[key]
            watch.released()

    async def _wake_up(self) -> None:
        # Redis being down is the read's to report, to every watched log.
        with contextlib.suppress(BackendUnavailable), unavailable_on_failure():
            pipe = self._conn.commands.pipeline(transaction=False)
            pipe.xadd(self._wake, {"w": "1"}, maxlen=16, approximate=True)
            pipe.pexpire(self._wake, _WAKE_TTL_MS)
            await pipe.execute()

    def _streams(self) -> dict[str, str]:
        """This round's streams and positions, dropping those no longer wanted."""
        streams = {self._wake: self._wake_at}
        for key, watched in list(self._watched.items()):
            if watched.watch.wanted():
                streams[key] = watched.position
            else:
                del self._watched[key]
                watched.watch.released()
        return streams

    async def _run(self) -> None:
        timed_out = False
        try:
            while len(streams := self._streams()) > 1:
                self._blocked = True
                try:
                    with unavailable_on_failure():
                        response = await self._conn.blocking.xread(
                            streams, block=BLOCK_MS, count=_COUNT
                        )
                except BackendUnavailable as exc:
                    # A read that timed out is read again (on a fresh
                    # connection) if Redis answers the probe now: this process
                    # may have been paused (SIGSTOP, a frozen VM) past the
                    # timeout while Redis answered all along, and its clients
                    # are owed what happened meanwhile (a run taken over), not
                    # "the session store is unavailable". The probe fails
                    # within a second when Redis is what hangs.
                    if timed_out or not isinstance(exc.__cause__, redis_errors.TimeoutError):
                        raise
                    await self._conn.ping()
                    timed_out = True
                    continue
                finally:
                    self._blocked = False
                timed_out = False
                for raw_key, entries in response or []:
                    await self._hand_over(raw_key.decode(), entries)
                await self._keep_alive()
        except BackendUnavailable as exc:
            log.warning("event streams lost: %s", exc)
            self._lose(exc)
        except asyncio.CancelledError:
            self._lose(BackendUnavailable("the event reader was stopped"))
            raise
        except Exception:
            log.exception("the event stream reader failed")
            self._lose(BackendUnavailable("the event reader failed"))
        finally:
            self._task = None

    async def _hand_over(self, key: str, entries: list[Any]) -> None:
        if key == self._wake:
            self._wake_at = entries[-1][0].decode()
            return
        watched = self._watched.get(key)
        if watched is None:
            return  # unwatched while the read was on its way
        watched.position = entries[-1][0].decode()
        try:
            await watched.watch.entries(entries)
        except BackendUnavailable as exc:
            self._drop(key, watched, exc)
        except Exception:
            log.exception("%s: handing events over failed", key)
            self._drop(key, watched, BackendUnavailable("the event reader failed"))

    def _drop(self, key: str, watched: _Watched, error: BackendUnavailable) -> None:
        if self._watched.get(key) is watched:
            del self._watched[key]
        watched.watch.lost(error)

    def _lose(self, error: BackendUnavailable) -> None:
        watched, self._watched = list(self._watched.values()), {}
        for item in watched:
            item.watch.lost(error)

    async def _keep_alive(self) -> None:
        """Watched logs do not expire, even while idle."""
        now = time.monotonic()
        if now - self._kept_alive < self._keep_every or not self._watched:
            return
        self._kept_alive = now
        plans = [w.watch.keep_alive() for w in self._watched.values()]
        with contextlib.suppress(BackendUnavailable), unavailable_on_failure():
            pipe = self._conn.commands.pipeline(transaction=False)
            for keys, ttl in plans:
                for key in keys:
                    pipe.pexpire(key, ttl)
            await pipe.execute()

    async def close(self) -> None:
        task = self._task
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


_streams = one_per_connection(StreamReader)


def streams_of(conn: RedisConnection) -> StreamReader:
    """The one reader of every stream this replica watches on ``conn``."""
    return _streams(conn)
