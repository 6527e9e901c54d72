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
* ``renewals``: the run leases' renewals, one *blocking* connection used by
  the lease keeper's own thread (``LeaseKeeper``): one round trip renews
  every lease the replica holds, never queued behind the writes of a loaded
  replica nor behind its event loop (a late renewal loses the run). Its
  socket timeout is the commands' own, never shorter: a renewal sent while
  Redis stalls (an ``appendfsync always`` fsync behind a busy disk) stays
  queued in Redis and runs as soon as Redis goes on, before any take-over
  sent after it, instead of being given up and sent again too late.
* ``probe``: the health probe's write, one connection (it answers for Redis,
  not for this replica's queue). Each probe also asks the server what it is
  (``INFO server``): a Redis Cluster node or a Sentinel given as the URL is
  refused with a clear message (``NotAPrimary``), at startup (exit 2) and
  while running (health NOT_SERVING), instead of every run failing on a
  ``MOVED`` reply or an unknown command.

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
import os
import weakref
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, Protocol, TypeVar
from urllib.parse import urlsplit, urlunsplit

import redis
import redis.asyncio as aioredis
from redis import exceptions as redis_errors
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.maint_notifications import MaintNotificationsConfig
from redis.retry import Retry as BlockingRetry

from omni_grpc.runtime.errors import BackendUnavailable

# Milliseconds a stream reader blocks per XREAD.
BLOCK_MS = 5_000
COMMAND_TIMEOUT = 5.0
CONNECT_TIMEOUT = 3.0
# The most connections one replica opens, per pool (see the module docstring).
COMMAND_CONNECTIONS = 24
READ_CONNECTIONS = 12
BLOCKING_CONNECTIONS = 4
RENEWAL_CONNECTIONS = 1
PROBE_CONNECTIONS = 1
# Every connection one replica may hold, whatever its load.
MAX_CONNECTIONS = (
    COMMAND_CONNECTIONS
    + READ_CONNECTIONS
    + BLOCKING_CONNECTIONS
    + RENEWAL_CONNECTIONS
    + PROBE_CONNECTIONS
)
HEALTH_CHECK_SECONDS = 10
# The health probe's socket timeout, and how long its key lives.
PROBE_TIMEOUT = 1.0
PROBE_KEY_MS = 60_000
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


# Error replies that say Redis cannot serve writes now, whatever the command
# (its first word), and what each means for an operator. Anything else is a
# bug in a command of ours and stays an internal error.
_REFUSALS = {
    "OOM": "Redis is out of memory (maxmemory reached; the backend needs noeviction)",
    "LOADING": "Redis is loading its data",
    "MISCONF": "Redis cannot persist its data",
    "READONLY": "Redis is a read-only replica",
    "BUSY": "Redis is busy running a script",
    "MASTERDOWN": "Redis lost its primary",
    "NOREPLICAS": "Redis has too few replicas to accept writes",
    "CLUSTERDOWN": "Redis Cluster is down",
    "TRYAGAIN": "Redis asked to try again",
    # A key served elsewhere: the URL names a Redis Cluster node (NotAPrimary).
    "MOVED": "Redis is a Cluster node (use one standalone primary)",
    "ASK": "Redis is a Cluster node (use one standalone primary)",
    "CROSSSLOT": "Redis is a Cluster node (use one standalone primary)",
}


# redis-py strips the first word of the replies it has a class for.
_CLASSES: tuple[tuple[type[Exception], str], ...] = (
    (redis_errors.OutOfMemoryError, "OOM"),
    (redis_errors.ReadOnlyError, "READONLY"),
    (redis_errors.ClusterDownError, "CLUSTERDOWN"),
    (redis_errors.MasterDownError, "MASTERDOWN"),
    (redis_errors.TryAgainError, "TRYAGAIN"),
    (redis_errors.MovedError, "MOVED"),
    (redis_errors.AskError, "ASK"),
    (redis_errors.ClusterCrossSlotError, "CROSSSLOT"),
)


def refusal(exc: redis_errors.ResponseError) -> str | None:
    """What an error reply means when it says Redis cannot serve now."""
    text = str(exc)
    word = next((w for cls, w in _CLASSES if isinstance(exc, cls)), None)
    if word is None:
        # A script's call refused inside it: "ERR ... OOM command not allowed".
        first = text.split(" ", 1)[0]
        word = "OOM" if "OOM command not allowed" in text else first
    meaning = _REFUSALS.get(word)
    return None if meaning is None else f"{meaning}: {text}"


@contextlib.contextmanager
def unavailable_on_failure() -> Iterator[None]:
    """Redis being down, full or otherwise unable to serve becomes
    BackendUnavailable (UNAVAILABLE, HTTP 503, health NOT_SERVING)."""
    try:
        yield
    except redis_errors.ResponseError as exc:
        meaning = refusal(exc)
        if meaning is not None:
            raise BackendUnavailable(meaning) from exc
        raise
    except _UNAVAILABLE as exc:
        raise BackendUnavailable(
            f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        ) from exc


class NotAPrimary(BackendUnavailable):
    """The URL names a Redis Cluster node or a Sentinel, not a Redis primary:
    a configuration error, not an outage (``serve`` exits 2 at startup)."""


# What ``redis_mode`` in INFO server says, and what the URL should name instead.
_MODES = {
    "cluster": (
        "is a Redis Cluster node (cluster_enabled); omni-grpc needs one Redis primary "
        "(its global keys span slots): give the URL of a standalone Redis"
    ),
    "sentinel": (
        "is a Redis Sentinel, which stores no data; give the URL of the primary it "
        "monitors (SENTINEL GET-MASTER-ADDR-BY-NAME names it) or a proxy in front of it"
    ),
}


def server_mode(info: dict[Any, Any]) -> str:
    """``standalone``, ``cluster`` or ``sentinel`` from an ``INFO server`` reply
    (Valkey and KeyDB report the same field; a server without it is standalone)."""
    mode = info.get("redis_mode", info.get(b"redis_mode", "standalone"))
    return mode.decode() if isinstance(mode, bytes) else str(mode)


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
        # Named by process: CLIENT LIST tells which replica holds what.
        client_name=f"omni-grpc-{os.getpid()}",
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
        # Made on first use (``renewals``): only a replica that renews needs it.
        self._renewals: Any = None
        # The health probe's own connection, with a short timeout: it never
        # queues behind the load on ``commands`` (see ``ping``).
        self.probe: Any = _pool(url, PROBE_CONNECTIONS, socket_timeout=PROBE_TIMEOUT, retries=0)
        # What else lives on this connection and ends with it (the stream
        # reader and the shared appender, through ``one_per_connection``), closed first.
        self._closers: list[Callable[[], Awaitable[None]]] = []

    def renewals(self) -> Any:
        """The keeper thread's blocking client: one connection, never
        retried (the keeper's next round is the retry)."""
        if self._renewals is None:
            pool = redis.BlockingConnectionPool.from_url(
                self.url,
                max_connections=RENEWAL_CONNECTIONS,
                timeout=COMMAND_TIMEOUT,
                socket_timeout=COMMAND_TIMEOUT,
                socket_connect_timeout=CONNECT_TIMEOUT,
                health_check_interval=HEALTH_CHECK_SECONDS,
                maint_notifications_config=MaintNotificationsConfig(enabled=False),
                retry=BlockingRetry(NoBackoff(), 0),
                decode_responses=False,
                client_name=f"omni-grpc-{os.getpid()}-renewals",
            )
            self._renewals = redis.Redis(connection_pool=pool)
        return self._renewals

    def on_close(self, closer: Callable[[], Awaitable[None]]) -> None:
        self._closers.append(closer)

    def session_key(self, session_id: str, part: str) -> str:
        return f"{self.prefix}{{{session_id}}}:{part}"

    def global_key(self, part: str) -> str:
        return f"{self.prefix}{part}"

    async def ping(self) -> None:
        """A write, not a PING: a Redis that answers but refuses writes (out
        of memory, read-only, unable to persist) cannot serve a run either.
        Asked in the same round trip whether it is a primary at all
        (NotAPrimary): one round trip, so the probe's bound stays one."""
        with unavailable_on_failure():
            pipe = self.probe.pipeline(transaction=False)
            pipe.info("server")
            pipe.set(self.global_key("probe"), b"1", px=PROBE_KEY_MS)
            info, written = await pipe.execute(raise_on_error=False)
            if isinstance(info, Exception):
                raise info
        mode = server_mode(info)
        if mode in _MODES:
            raise NotAPrimary(f"{redacted(self.url)} {_MODES[mode]}")
        if isinstance(written, Exception):
            with unavailable_on_failure():
                raise written

    async def aclose(self) -> None:
        for closer in self._closers:
            await closer()
        for client in (self.commands, self.reads, self.blocking, self.probe):
            with contextlib.suppress(Exception):
                await client.aclose()
                await client.connection_pool.disconnect()
        if self._renewals is not None:
            # Blocking, but a close: it sends nothing and waits for nothing.
            with contextlib.suppress(Exception):
                self._renewals.close()
                self._renewals.connection_pool.disconnect()


class _Closable(Protocol):
    async def close(self) -> None: ...


_C = TypeVar("_C", bound=_Closable)


def one_per_connection(make: Callable[[RedisConnection], _C]) -> Callable[[RedisConnection], _C]:
    """A getter of the one ``make(conn)`` per connection, made on first use and
    closed with the connection; the registry lives with the getter so that the
    connection needs to know nothing of what hangs on it."""
    made: weakref.WeakKeyDictionary[RedisConnection, _C] = weakref.WeakKeyDictionary()

    def of(conn: RedisConnection) -> _C:
        thing = made.get(conn)
        if thing is None:
            thing = made[conn] = make(conn)
            conn.on_close(thing.close)
        return thing

    return of
