"""Idempotency keys: a request sent again gets the first one's answer.

A client that sent a task's POST and got no answer (the connection dropped,
a proxy timed out) cannot tell whether the task started. With an
``Idempotency-Key`` header (the IETF httpapi draft, as Stripe's API) it can
send the same request again: the server remembers each key's answer for
``WINDOW`` seconds and answers a repeat with it, starting nothing.

A key is *claimed* by the first request that carries it; that request then
``remember``s its answer, or ``forget``s the key when it started nothing (an
error), so a retry runs afresh. A claim not followed by either (its replica
died) lapses after ``PENDING`` seconds. The keys live in the backend beside
the other shared state, so any replica answers a repeat the same way.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Protocol

# Seconds a key's answer is kept (Stripe keeps them 24 hours).
WINDOW = 24 * 60 * 60.0
# Seconds a claim without an answer holds its key.
PENDING = 60.0
# Keys one process keeps (the memory store); the oldest go first past it.
MOST_KEYS = 100_000


@dataclass(frozen=True, slots=True)
class Claimed:
    """What an earlier request with the same key left: the fingerprint of
    its request, and its answer (None while it is still being answered)."""

    fingerprint: str
    answer: bytes | None


class IdempotencyKeys(Protocol):
    async def claim(self, key: str, fingerprint: str) -> Claimed | None:
        """None: the key is now this request's (answer, then ``remember`` or
        ``forget``). Otherwise what the key's first request left."""
        ...

    async def remember(self, key: str, fingerprint: str, answer: bytes) -> None:
        """Keeps ``answer`` as the key's for ``WINDOW`` seconds."""
        ...

    async def forget(self, key: str) -> None:
        """Frees a claimed key whose request started nothing."""
        ...


class MemoryIdempotencyKeys:
    """The keys of one process, at most ``most`` of them."""

    def __init__(
        self, window: float = WINDOW, pending: float = PENDING, most: int = MOST_KEYS
    ) -> None:
        self.window = window
        self.pending = pending
        self.most = most
        # key -> (expiry on the monotonic clock, what is kept); in expiry order
        # but for pending claims, which expire sooner: both are checked.
        self._keys: OrderedDict[str, tuple[float, Claimed]] = OrderedDict()

    async def claim(self, key: str, fingerprint: str) -> Claimed | None:
        now = time.monotonic()
        self._expire(now)
        held = self._keys.get(key)
        if held is not None and held[0] > now:
            return held[1]
        self._keys[key] = (now + self.pending, Claimed(fingerprint, None))
        self._keys.move_to_end(key)
        while len(self._keys) > self.most:
            self._keys.popitem(last=False)
        return None

    async def remember(self, key: str, fingerprint: str, answer: bytes) -> None:
        self._keys[key] = (time.monotonic() + self.window, Claimed(fingerprint, answer))
        self._keys.move_to_end(key)

    async def forget(self, key: str) -> None:
        self._keys.pop(key, None)

    def _expire(self, now: float) -> None:
        # Oldest first; a lapsed pending claim further in is dropped when met.
        while self._keys:
            key, (expiry, _) = next(iter(self._keys.items()))
            if expiry > now:
                break
            del self._keys[key]
