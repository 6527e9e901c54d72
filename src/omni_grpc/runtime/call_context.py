"""A call as the runtime sees it, whichever transport carried it (as
a2a-python's ``ServerCallContext``): who called, until when the call may
last, whether it has ended, and the request's metadata. And the one bearer
check every transport asks (``BearerCheck``), so a token is compared in one
place, one way (constant time), with one answer (``Unauthenticated``).

Transports build a ``CallContext`` from their own wire form (gRPC's
metadata and deadline, HTTP headers and ``connect-timeout-ms``) and pass it
to the runtime's calls; the runtime reads only this, never a transport's
request object.
"""

from __future__ import annotations

import asyncio
import hmac
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from omni_grpc.runtime.errors import Unauthenticated

# The principal of a call that presented the server's token. There is one
# token, so there is one caller; the name says how it was recognised.
BEARER = "bearer"
# The principal of a call on a server that asks for no token.
ANONYMOUS = "anonymous"

# The abort's reason when a Run call's deadline passes with its run going
# (whether the runtime's timer or the transport's close sees it first).
DEADLINE_REASON = "the Run call's deadline passed"

MISSING_TOKEN = "missing bearer token"
WRONG_TOKEN = "invalid bearer token"


@dataclass
class CallContext:
    """One call: its caller, its deadline (``time.monotonic()`` seconds,
    None for none), its end (``ended``: the client went away or the call
    was cancelled) and its metadata (lower-case names, one value each)."""

    who: str = ANONYMOUS
    deadline: float | None = None
    metadata: Mapping[str, str] = field(default_factory=dict)
    ended: asyncio.Event = field(default_factory=asyncio.Event)

    @classmethod
    def with_timeout(
        cls,
        timeout: float | None,
        *,
        who: str = ANONYMOUS,
        metadata: Mapping[str, str] | None = None,
    ) -> CallContext:
        """A context whose deadline is ``timeout`` seconds from now."""
        deadline = None if timeout is None else time.monotonic() + timeout
        return cls(who=who, deadline=deadline, metadata=dict(metadata or {}))

    def remaining(self) -> float | None:
        """Seconds left before the deadline (0 once passed), None without one."""
        if self.deadline is None:
            return None
        return max(0.0, self.deadline - time.monotonic())

    @property
    def expired(self) -> bool:
        left = self.remaining()
        return left is not None and left <= 0

    def end(self) -> None:
        """The transport says the call is over (its client left)."""
        self.ended.set()


class BearerCheck:
    """The server's bearer token and the one comparison against it."""

    def __init__(self, token: str) -> None:
        if not token:
            raise ValueError("the auth token must not be empty")
        self._token = token.encode()

    @staticmethod
    def credentials(authorization: str | None) -> str | None:
        """The token of an ``Authorization: Bearer <token>`` value (the
        scheme is case-insensitive, RFC 7235); None for any other."""
        if authorization is None:
            return None
        scheme, _, credentials = authorization.partition(" ")
        if scheme.lower() == "bearer" and credentials.strip():
            return credentials.strip()
        return None

    def check(self, given: str | None) -> str:
        """The caller (``BEARER``) when ``given`` is the token; else raises
        ``Unauthenticated`` saying whether it was missing or wrong."""
        if given is None:
            raise Unauthenticated(MISSING_TOKEN)
        if not hmac.compare_digest(given.encode(), self._token):
            raise Unauthenticated(WRONG_TOKEN)
        return BEARER
