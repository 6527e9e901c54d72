"""One replica's connections to Redis, its key names, and its failure mapping.

Two clients: one for commands, with a short socket timeout so an unreachable
Redis is noticed in seconds, and one for blocking stream reads, whose timeout
sits above the ``BLOCK`` time (a read cancelled mid-reply costs a reconnect,
so blocking readers are long-lived and block a few seconds at a time).

Keys of one session share the hash tag ``{<session_id>}``; the few global
keys (the session index, the set of open runs, replica inboxes) do not, so
the backend needs one Redis primary (with replicas or Sentinel), not Cluster.
Only commands Valkey also has are used: strings, hashes, sets, streams
(``XADD``/``XRANGE``/``XREAD``/``XDEL``/``XLEN``) and ``EVALSHA``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import redis.asyncio as aioredis
from redis import exceptions as redis_errors

from omni_grpc.runtime.errors import BackendUnavailable

# Milliseconds a stream reader blocks per XREAD.
BLOCK_MS = 5_000
COMMAND_TIMEOUT = 5.0
CONNECT_TIMEOUT = 3.0

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


class RedisConnection:
    def __init__(self, url: str, *, prefix: str = "omni:") -> None:
        self.url = url
        self.prefix = prefix
        common: dict[str, Any] = {
            "socket_connect_timeout": CONNECT_TIMEOUT,
            "decode_responses": False,
        }
        # Typed Any: redis-py types every reply as bytes | str (it depends on
        # decode_responses); with decode_responses=False replies are bytes.
        self.commands: Any = aioredis.Redis.from_url(url, socket_timeout=COMMAND_TIMEOUT, **common)
        self.blocking: Any = aioredis.Redis.from_url(
            url, socket_timeout=BLOCK_MS / 1000 + COMMAND_TIMEOUT, **common
        )

    def session_key(self, session_id: str, part: str) -> str:
        return f"{self.prefix}{{{session_id}}}:{part}"

    def global_key(self, part: str) -> str:
        return f"{self.prefix}{part}"

    async def ping(self) -> None:
        with unavailable_on_failure():
            await self.commands.ping()

    async def aclose(self) -> None:
        with contextlib.suppress(Exception):
            await self.commands.aclose()
        with contextlib.suppress(Exception):
            await self.blocking.aclose()
