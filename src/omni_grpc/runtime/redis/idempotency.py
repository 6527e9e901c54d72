"""Idempotency keys in Redis (runtime/idempotency.py), shared by every replica.

One string per key, ``<prefix>idem:<key>``: the request's fingerprint, then
``?`` while its first request is being answered (``SET NX`` with the short
``PENDING`` expiry) or ``=`` and the answer (the full ``WINDOW``). Redis
expires both; nothing else cleans up.
"""

from __future__ import annotations

from omni_grpc.runtime.idempotency import PENDING, WINDOW, Claimed
from omni_grpc.runtime.redis.connection import RedisConnection, unavailable_on_failure

_PENDING_MARK = b"?"
_ANSWER_MARK = b"="


class RedisIdempotencyKeys:
    def __init__(
        self, conn: RedisConnection, window: float = WINDOW, pending: float = PENDING
    ) -> None:
        self._conn = conn
        self._window_ms = int(window * 1000)
        self._pending_ms = int(pending * 1000)

    def _key(self, key: str) -> str:
        return self._conn.global_key(f"idem:{key}")

    async def claim(self, key: str, fingerprint: str) -> Claimed | None:
        name = self._key(key)
        mine = fingerprint.encode() + _PENDING_MARK
        # Twice at most: the key may lapse between the SET and the GET.
        for _ in range(2):
            with unavailable_on_failure():
                if await self._conn.commands.set(name, mine, nx=True, px=self._pending_ms):
                    return None
                held = await self._conn.commands.get(name)
            if held is not None:
                return _decode(bytes(held))
        return None  # pragma: no cover - a key that keeps lapsing in microseconds

    async def remember(self, key: str, fingerprint: str, answer: bytes) -> None:
        value = fingerprint.encode() + _ANSWER_MARK + answer
        with unavailable_on_failure():
            await self._conn.commands.set(self._key(key), value, px=self._window_ms)

    async def forget(self, key: str) -> None:
        with unavailable_on_failure():
            await self._conn.commands.delete(self._key(key))


def _decode(value: bytes) -> Claimed:
    # The fingerprint is hex, so the first mark is the separator.
    cut = min(i for i in (value.find(_PENDING_MARK), value.find(_ANSWER_MARK)) if i >= 0)
    fingerprint = value[:cut].decode()
    if value[cut : cut + 1] == _PENDING_MARK:
        return Claimed(fingerprint, None)
    return Claimed(fingerprint, value[cut + 1 :])
