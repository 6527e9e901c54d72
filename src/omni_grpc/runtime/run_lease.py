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

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from omni_grpc.runtime.errors import BackendUnavailable, SessionNotFound

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Lease:
    session_id: str
    # The replica holding the run (where Approve and Abort are sent).
    owner: str
    token: int
    # time.monotonic() by which the holder must have renewed. Taken before the
    # claim was sent, so the backend's own expiry is never earlier than this.
    valid_until: float
    # For a run taken over (``take_over``): the replica that held it, and how
    # many seconds before the take-over it last renewed it, when known.
    taken_from: str | None = None
    renewed_ago: float | None = None

    def still_valid(self, margin: float = 0.0) -> bool:
        return time.monotonic() + margin < self.valid_until


class LeaseOwner(NamedTuple):
    """Who holds a session's open run: the replica, and the token it holds it
    with (a command for the run carries it, ``control_channel``)."""

    replica: str
    token: int


class RunLease(Protocol):
    @property
    def ttl(self) -> float:
        """Seconds a lease lives without renewal."""
        ...

    async def acquire(self, session_id: str, owner: str) -> Lease | None:
        """Claims an idle session; None when a run is open (``SessionBusy``)."""
        ...

    async def claim(self, session_id: str, owner: str, *, new: bool = False) -> Lease | None:
        """``acquire`` for a run, in one atomic step with the session index's
        say: only a live session is claimed (``new``: or the created one the
        claiming Run made, which becomes live). Raises ``SessionNotFound`` for
        any other (unknown, being deleted, deleted), so no run starts once a
        delete has begun."""
        ...

    async def renew(self, lease: Lease) -> Lease | None:
        """Extends the lease; None when its token is no longer current."""
        ...

    async def renew_many(self, leases: list[Lease]) -> list[Lease | None]:
        """``renew`` for each lease, in one round trip, on a connection of its
        own (never queued behind the writes of a loaded replica)."""
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

    async def owner(self, session_id: str) -> LeaseOwner | None:
        """Who holds the open run, None when idle (or orphaned)."""
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

    async def seed_fence(self, session_id: str, at_least: int) -> None:
        """Makes every later token larger than ``at_least``: a session whose
        trace was fenced (``TraceStore.fence_of``) indexed again by a backend
        that lost its tokens, so its next run is not fenced out by its own
        trace."""
        ...


class MemoryRunLease:
    """One process: a lease never expires (the process that would renew it is
    the process that would notice). No method awaits, so each is atomic."""

    def __init__(self, open_for_run: Callable[[str, bool], bool] | None = None) -> None:
        self._open: dict[str, Lease] = {}
        self._tokens: dict[str, int] = {}
        # The session index's check of a claim (``MemorySessionIndex.open_for_run``).
        self._open_for_run = open_for_run or (lambda _sid, _new: True)

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

    async def claim(self, session_id: str, owner: str, *, new: bool = False) -> Lease | None:
        if not self._open_for_run(session_id, new):
            raise SessionNotFound(session_id)
        return await self.acquire(session_id, owner)

    async def renew(self, lease: Lease) -> Lease | None:
        return lease if self._open.get(lease.session_id) == lease else None

    async def renew_many(self, leases: list[Lease]) -> list[Lease | None]:
        return [await self.renew(lease) for lease in leases]

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

    async def owner(self, session_id: str) -> LeaseOwner | None:
        lease = self._open.get(session_id)
        return LeaseOwner(lease.owner, lease.token) if lease else None

    async def running(self, session_ids: list[str]) -> set[str]:
        return {sid for sid in session_ids if sid in self._open}

    async def orphans(self) -> list[str]:
        return []

    async def take_over(self, session_id: str, owner: str) -> Lease | None:
        return None

    async def seed_fence(self, session_id: str, at_least: int) -> None:
        self._tokens[session_id] = max(self._tokens.get(session_id, 0), at_least)


class Holder(Protocol):
    """What holds a lease in this process: a claim, then the run it became."""

    lease: Lease


@dataclass
class Claim:
    """A lease claimed for a run that has not started yet."""

    lease: Lease


@dataclass
class _Kept:
    holder: Holder
    on_lost: Callable[[], None]


class LeaseKeeper:
    """Renews every lease this process holds, from its claim until its run's
    end is published, in one round trip per round (``renew_many``).

    One keeper per process rather than one renewal per run: under load, a
    renewal queued behind the writes of hundreds of runs came late, and the
    process's own sweep then took its live runs over (#29). The keeper's
    round trip has a connection of its own, and the sweep asks the keeper
    first (``holds``), so a process never takes over a run it holds."""

    def __init__(self, leases: RunLease) -> None:
        self._leases = leases
        self._kept: dict[str, _Kept] = {}
        self._task: asyncio.Task[None] | None = None

    def keep(self, holder: Holder, on_lost: Callable[[], None] = lambda: None) -> None:
        """Renews ``holder.lease`` until ``drop``; ``on_lost`` once the
        backend refuses a renewal (another process took the run over).
        Replaces what was kept for the session."""
        self._kept[holder.lease.session_id] = _Kept(holder, on_lost)
        if self._task is None and not math.isinf(self._leases.ttl):
            self._task = asyncio.create_task(self._loop(), name="omni-lease-keeper")

    def drop(self, holder: Holder) -> None:
        kept = self._kept.get(holder.lease.session_id)
        if kept is not None and kept.holder is holder:
            del self._kept[holder.lease.session_id]

    def holds(self, session_id: str) -> bool:
        return session_id in self._kept

    async def renew_now(self, session_id: str) -> bool:
        """Renews the lease held for ``session_id`` at once (the sweep found it
        expired): False when none is held or it was lost."""
        kept = self._kept.get(session_id)
        if kept is None:
            return False
        try:
            renewed = await self._leases.renew(kept.holder.lease)
        except BackendUnavailable:
            return True  # not refused: the keeper goes on trying
        self._settle([kept], [renewed])
        return renewed is not None

    async def _loop(self) -> None:
        interval = self._leases.ttl / 4
        try:
            while self._kept:
                await asyncio.sleep(interval)
                kept = list(self._kept.values())
                if not kept:
                    break
                try:
                    renewed = await self._leases.renew_many([k.holder.lease for k in kept])
                except BackendUnavailable:
                    # No answer is not a refusal: the leases are kept and tried
                    # again next round (a renewal succeeds even after the key
                    # expired, unless another replica took the run over). Till
                    # then a run's trace writes stop at its lease's local
                    # expiry (``Recorder.check_lease``), and its log writes are
                    # fenced by the token in Redis.
                    continue
                self._settle(kept, renewed)
        except Exception:  # a bug here must not leave the leases unrenewed silently
            log.exception("renewing the run leases failed")
        finally:
            self._task = None
            if self._kept and not math.isinf(self._leases.ttl):
                self._task = asyncio.create_task(self._loop(), name="omni-lease-keeper")

    def _settle(self, kept: list[_Kept], renewed: list[Lease | None]) -> None:
        for item, lease in zip(kept, renewed, strict=True):
            session_id = item.holder.lease.session_id
            if self._kept.get(session_id) is not item:
                continue  # dropped (or replaced) while the renewal was out
            if lease is None:
                del self._kept[session_id]
                item.on_lost()
            elif lease.token == item.holder.lease.token:
                item.holder.lease = lease

    async def close(self) -> None:
        task, self._task = self._task, None
        self._kept.clear()
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
