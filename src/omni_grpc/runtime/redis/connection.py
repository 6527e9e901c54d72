"""One replica's connections to Redis, its key names, and its failure mapping.

The connections a replica holds are bounded by design, whatever its load:

* ``commands``: writes (the publish and lease scripts, index updates), a
  pool of ``COMMAND_CONNECTIONS``. A caller past the cap waits for a free one
  (up to ``POOL_WAIT``), it is never refused at once. A write is never
  retried: its outcome is unknown once it was sent.
* ``reads``: idempotent reads, a pool of ``READ_CONNECTIONS``, retried once on
  a fresh connection when the one they were sent on turned out dead.
* ``blocking``: blocking stream reads, a small pool of their own: one reader
  per replica multiplexes every watched session's stream
  (``stream_reader.py``), and the control channel reads its inbox.

A pooled connection is checked before each use: one Redis closed (a restart)
is replaced before a command goes out on it, so a write never fails on a
connection known dead; one idle for ``HEALTH_CHECK_SECONDS`` is pinged first
(a peer that vanished without closing).

Keys of one session share the hash tag ``{<session_id>}``; the few global
keys (the session index, the set of open runs, replica inboxes) do not, so
the backend needs one Redis primary (with replicas or Sentinel), not Cluster.
Only commands Valkey also has are used: strings, hashes, sets, streams
(``XADD``/``XRANGE``/``XREAD``/``XDEL``/``XLEN``) and ``EVALSHA``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import redis.asyncio as aioredis
from redis import exceptions as redis_errors
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.maint_notifications import MaintNotificationsConfig

from omni_grpc.runtime.errors import BackendUnavailable

# Milliseconds a stream reader blocks per XREAD.
BLOCK_MS = 5_000
COMMAND_TIMEOUT = 5.0
CONNECT_TIMEOUT = 3.0
# The most connections one replica opens, per pool (see the module docstring).
COMMAND_CONNECTIONS = 24
READ_CONNECTIONS = 12
BLOCKING_CONNECTIONS = 4
HEALTH_CHECK_SECONDS = 10
# How long a caller waits for a free connection of a full pool: a queue, not
# a refusal (each busy connection is freed within its socket timeout).
POOL_WAIT = 20.0

_UNAVAILABLE = (
    redis_errors.ConnectionError,
    redis_errors.TimeoutError,
    redis_errors.BusyLoadingError,
    ConnectionError,
    TimeoutError,
    OSError,
)


@contextlib.contextmanager
def unavailable_on_failure() -> Iterator[None]:
    """Redis being down (or still loading its AOF) becomes BackendUnavailable."""
    try:
        yield
    except redis_errors.ResponseError as exc:
        if "LOADING" in str(exc) or "MISCONF" in str(exc) or "READONLY" in str(exc):
            raise BackendUnavailable(str(exc)) from exc
        raise
    except _UNAVAILABLE as exc:
        raise BackendUnavailable(
            f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        ) from exc


def redacted(url: str) -> str:
    """The URL without its password, for logs and the startup banner."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    user = f"{parts.username}:***@" if parts.username else ":***@"
    return urlunsplit((parts.scheme, user + host, parts.path, parts.query, parts.fragment))


def _pool(url: str, size: int, *, socket_timeout: float, retries: int) -> Any:
    # Typed Any: redis-py types every reply as bytes | str (it depends on
    # decode_responses); with decode_responses=False replies are bytes.
    pool = aioredis.BlockingConnectionPool.from_url(
        url,
        max_connections=size,
        timeout=POOL_WAIT,
        socket_timeout=socket_timeout,
        socket_connect_timeout=CONNECT_TIMEOUT,
        health_check_interval=HEALTH_CHECK_SECONDS,
        # Maintenance notifications (a Redis Enterprise feature) turn off the
        # pool's check that a connection was not closed by the server.
        maint_notifications_config=MaintNotificationsConfig(enabled=False),
        retry=Retry(NoBackoff(), retries),
        decode_responses=False,
    )
    return aioredis.Redis(connection_pool=pool)


class RedisConnection:
    def __init__(self, url: str, *, prefix: str = "omni:") -> None:
        self.url = url
        self.prefix = prefix
        self.commands: Any = _pool(
            url, COMMAND_CONNECTIONS, socket_timeout=COMMAND_TIMEOUT, retries=0
        )
        self.reads: Any = _pool(url, READ_CONNECTIONS, socket_timeout=COMMAND_TIMEOUT, retries=1)
        self.blocking: Any = _pool(
            url, BLOCKING_CONNECTIONS, socket_timeout=BLOCK_MS / 1000 + COMMAND_TIMEOUT, retries=0
        )
        # What else lives on this connection and ends with it (the stream
        # reader, ``stream_reader.streams_of``), closed first.
        self._closers: list[Callable[[], Awaitable[None]]] = []

    def on_close(self, closer: Callable[[], Awaitable[None]]) -> None:
        self._closers.append(closer)

    def session_key(self, session_id: str, part: str) -> str:
        return f"{self.prefix}{{{session_id}}}:{part}"

    def global_key(self, part: str) -> str:
        return f"{self.prefix}{part}"

    async def ping(self) -> None:
        with unavailable_on_failure():
            await self.commands.ping()

    async def aclose(self) -> None:
        for closer in self._closers:
            await closer()
        for client in (self.commands, self.reads, self.blocking):
            with contextlib.suppress(Exception):
                await client.aclose()
                await client.connection_pool.disconnect()
