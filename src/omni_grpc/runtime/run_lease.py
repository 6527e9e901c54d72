"""The run lease: one replica runs a session's task at a time.

``acquire`` claims an idle session atomically and hands out a fencing token
that grows with every claim. The holder renews the lease well inside its TTL;
a holder that stops renewing (its process died) leaves an *orphaned* run,
which another replica takes over with ``take_over`` (a new, larger token) and
closes. Shared backends check the token on every write (``EventLog.publish``),
so a stale holder that comes back writes nothing.

A run is open from ``acquire`` until ``release``: the session is busy for
that whole time, including while an orphan waits to be closed. A run that
ends for any reason releases its lease in the same step: with its closing
``task_state idle`` (one script on Redis), or, for a run that never started
(its claim's answer was lost, or the step after the claim failed), at once
and then again until the backend answers (``Recovery.drop_claim``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Lease:
    session_id: str
    # The replica holding the run (where Approve and Abort are sent).
    owner: str
    token: int
    # time.monotonic() by which the holder must have renewed. Taken before the
    # claim was sent, so the backend's own expiry is never earlier than this.
    valid_until: float

    def still_valid(self, margin: float = 0.0) -> bool:
        return time.monotonic() + margin < self.valid_until


class RunLease(Protocol):
    @property
    def ttl(self) -> float:
        """Seconds a lease lives without renewal."""
        ...

    async def acquire(self, session_id: str, owner: str) -> Lease | None:
        """Claims an idle session; None when a run is open (``SessionBusy``)."""
        ...

    async def renew(self, lease: Lease) -> Lease | None:
        """Extends the lease; None when its token is no longer current."""
        ...

    async def release(self, lease: Lease) -> bool:
        """Closes the run if ``lease`` still holds it; False when fenced."""
        ...

    async def release_claim(self, session_id: str, owner: str, keep: int | None = None) -> bool:
        """Closes the open run if ``owner`` holds it with any token but ``keep``
        (the token of a task ``owner`` runs for the session, if one does): for
        a claim whose answer was lost (the backend may have taken it). False:
        nothing of the kind was held."""
        ...

    async def owner(self, session_id: str) -> str | None:
        """The replica holding the open run, None when idle (or orphaned)."""
        ...

    async def running(self, session_ids: list[str]) -> set[str]:
        """Those of ``session_ids`` with an open run."""
        ...

    async def orphans(self) -> list[str]:
        """Sessions whose run is open but whose lease expired."""
        ...

    async def take_over(self, session_id: str, owner: str) -> Lease | None:
        """Claims an orphaned run with a new token; None unless it is one."""
        ...


class MemoryRunLease:
    """One process: a lease never expires (the process that would renew it is
    the process that would notice). No method awaits, so each is atomic."""

    def __init__(self) -> None:
        self._open: dict[str, Lease] = {}
        self._tokens: dict[str, int] = {}

    @property
    def ttl(self) -> float:
        return float("inf")

    async def acquire(self, session_id: str, owner: str) -> Lease | None:
        if session_id in self._open:
            return None
        token = self._tokens.get(session_id, 0) + 1
        self._tokens[session_id] = token
        lease = self._open[session_id] = Lease(session_id, owner, token, float("inf"))
        return lease

    async def renew(self, lease: Lease) -> Lease | None:
        return lease if self._open.get(lease.session_id) == lease else None

    async def release(self, lease: Lease) -> bool:
        return self.release_token(lease.session_id, lease.token)

    def release_token(self, session_id: str, token: int) -> bool:
        """``release`` without awaiting (the memory log calls it on ``end_run``)."""
        lease = self._open.get(session_id)
        if lease is None or lease.token != token:
            return False
        del self._open[session_id]
        return True

    async def release_claim(self, session_id: str, owner: str, keep: int | None = None) -> bool:
        lease = self._open.get(session_id)
        if lease is None or lease.owner != owner or lease.token == keep:
            return False
        del self._open[session_id]
        return True

    async def owner(self, session_id: str) -> str | None:
        lease = self._open.get(session_id)
        return lease.owner if lease else None

    async def running(self, session_ids: list[str]) -> set[str]:
        return {sid for sid in session_ids if sid in self._open}

    async def orphans(self) -> list[str]:
        return []

    async def take_over(self, session_id: str, owner: str) -> Lease | None:
        return None
