"""``Idempotency-Key`` on the HTTP routes that start a task.

``POST /api/sessions/{id}/tasks`` and ``POST /v1/runs`` with the header may
be sent again, after a dropped connection or a timeout, without starting a
second task: a repeat within the window (runtime/idempotency.py, 24 hours)
gets the first request's answer, marked ``Idempotent-Replayed: true``. For
the task route that is the same 202 body; for a dialect run, the run's
stream from its first frame (as a resume from its start), whether it is
still going or long done. As the IETF httpapi draft says: the same key with
another request is 422 ``idempotency_key_reused``; a repeat while the first
is still being answered is 409 ``idempotency_key_in_use``. A request that
fails starts nothing and leaves no answer, so its retry runs afresh.

A key belongs to its route and path: the same key on another session's
task route is another key.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

import orjson
from starlette.requests import Request

from omni_grpc.runtime.errors import ErrorCode
from omni_grpc.runtime.interface import IdempotencyKeys
from omni_grpc.transport.sse.errors import ApiError, HttpRefusal
from omni_grpc.vocabulary import IDEMPOTENCY_KEY_HEADER, IDEMPOTENT_REPLAYED_HEADER

# Stripe's limit; printable ASCII without spaces around it (a header value).
_KEY = re.compile(r"^[\x21-\x7e](?:[\x20-\x7e]{0,253}[\x21-\x7e])?$")
REPLAYED = {IDEMPOTENT_REPLAYED_HEADER: "true"}


@dataclass
class Once:
    """One request's key: ``replay`` is the first answer when it is a repeat."""

    keys: IdempotencyKeys | None = None
    key: str = ""
    fingerprint: str = ""
    replay: dict[str, Any] | None = None

    async def remember(self, answer: dict[str, Any]) -> None:
        if self.keys is not None:
            await self.keys.remember(self.key, self.fingerprint, orjson.dumps(answer))

    async def forget(self) -> None:
        if self.keys is not None:
            await self.keys.forget(self.key)


async def once(keys: IdempotencyKeys, request: Request, body: object) -> Once:
    """The request's claim on its ``Idempotency-Key`` (an empty ``Once`` without one)."""
    raw = request.headers.get(IDEMPOTENCY_KEY_HEADER)
    if raw is None:
        return Once()
    if not _KEY.match(raw):
        raise ApiError(
            ErrorCode.INVALID_REQUEST,
            f"{IDEMPOTENCY_KEY_HEADER}: 1 to 255 printable ASCII characters",
        )
    key = _digest(f"{request.method} {request.url.path}\n{raw}".encode())
    fingerprint = _digest(orjson.dumps(body, option=orjson.OPT_SORT_KEYS))
    claimed = await keys.claim(key, fingerprint)
    if claimed is None:
        return Once(keys, key, fingerprint)
    if claimed.fingerprint != fingerprint:
        raise ApiError(
            HttpRefusal.IDEMPOTENCY_KEY_REUSED,
            f"this {IDEMPOTENCY_KEY_HEADER} came with another request; "
            "a new request needs a new key",
        )
    if claimed.answer is None:
        raise ApiError(
            HttpRefusal.IDEMPOTENCY_KEY_IN_USE,
            f"a request with this {IDEMPOTENCY_KEY_HEADER} is still being answered; "
            "send it again shortly",
        )
    answer = orjson.loads(claimed.answer)
    assert isinstance(answer, dict)
    return Once(replay=answer)


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
