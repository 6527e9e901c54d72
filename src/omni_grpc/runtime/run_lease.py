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
import functools
import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from omni_grpc.runtime.errors import BackendUnavailable, SessionNotFound

log = logging.getLogger(__name__)

# A lease counts as this process's for this share of its TTL after the
# renewal was sent (room for this clock and the backend's to disagree a
# little); backends make their leases with it.
LOCAL_SHARE = 0.9
# The most a writer waits for a late renewal before its run gives up (as
# when the backend is down): a renewal sent while Redis stalls is answered
# within its socket timeout, the commands' own.
RENEW_DEADLINE = 5.0


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


@dataclass(frozen=True)
class Beat:
    """An open run as the sweep sees it: how many times its lease was granted
    or renewed (the count moves while its owner is alive), and whether the
    lease is still there in the backend."""

    count: int
    leased: bool


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

    def renew_many_blocking(self, leases: list[Lease]) -> list[Lease | None]:
        """``renew_many`` for the keeper's own thread, on a blocking
        connection of its own, bounded by the lease's TTL."""
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

    async def open_runs(self) -> dict[str, Beat]:
        """Every open run with its beat (what the sweep watches)."""
        ...

    async def take_over(self, session_id: str, owner: str, beat: int | None = None) -> Lease | None:
        """Claims an orphaned run with a new token; None unless it is one, or
        when its beat is no longer ``beat`` (renewed since it was seen)."""
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
        return self.renew_many_blocking(leases)

    def renew_many_blocking(self, leases: list[Lease]) -> list[Lease | None]:
        return [lease if self._open.get(lease.session_id) == lease else None for lease in leases]

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

    async def open_runs(self) -> dict[str, Beat]:
        return {}

    async def take_over(self, session_id: str, owner: str, beat: int | None = None) -> Lease | None:
        return None


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
    end is published, in one round trip per round (``renew_many_blocking``).

    The rounds run on a thread of their own, on a connection of their own,
    so nothing the replica's own load does (a loop busy with requests, trace
    appends waiting on a slow disk, a full command pool) delays them (#29,
    #40): what starves the replica's work does not starve its leases, which
    is what Kubernetes' leader election keeps apart too (a lease, a retry
    period of a quarter of it, a renew deadline). A round's answer updates
    the holders' leases from that thread (a reference assignment); what must
    run on the event loop (``on_lost``, the waiters of ``fresh``) is handed
    to it.

    The renew deadline: a lease counts locally until 90% of its TTL after its
    last renewal was *sent* (``Lease.still_valid``). A writer whose lease is
    past that waits for the next round (``fresh``), up to the renew deadline
    (``RENEW_DEADLINE``, at least the TTL), then gives its run up as if the
    backend were down; a renewal the backend refuses (another replica took
    the run over) ends the lease for good (``on_lost``). The sweep asks the
    keeper first (``holds``), so a process never takes over a run it holds,
    and takes over nothing while its own renewals are late (``late``)."""

    def __init__(self, leases: RunLease) -> None:
        self._leases = leases
        self._kept: dict[str, _Kept] = {}
        # Guards ``_kept`` between the loop (keep, drop) and the thread.
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        # Set after every round the backend answered (on the loop).
        self._round: asyncio.Event | None = None
        # time.monotonic() when the last answered round was sent (or when the
        # keeper began to hold something: with nothing to renew none is late).
        self.answered_at = time.monotonic()
        self.rounds = 0

    @property
    def period(self) -> float:
        """Seconds between rounds: a quarter of the lease's TTL."""
        return self._leases.ttl / 4

    def keep(self, holder: Holder, on_lost: Callable[[], None] = lambda: None) -> None:
        """Renews ``holder.lease`` until ``drop``; ``on_lost`` once the
        backend refuses a renewal (another process took the run over).
        Replaces what was kept for the session."""
        with self._lock:
            if not self._kept:
                # Nothing was held: no round was owed, so none is late.
                self.answered_at = time.monotonic()
            self._kept[holder.lease.session_id] = _Kept(holder, on_lost)
        if self._thread is None and not math.isinf(self._leases.ttl):
            self._loop = asyncio.get_running_loop()
            self._thread = threading.Thread(target=self._run, name="omni-lease-keeper", daemon=True)
            self._thread.start()

    def drop(self, holder: Holder) -> None:
        with self._lock:
            kept = self._kept.get(holder.lease.session_id)
            if kept is not None and kept.holder is holder:
                del self._kept[holder.lease.session_id]

    def holds(self, session_id: str) -> bool:
        return session_id in self._kept

    def wake(self) -> None:
        """A round now (the sweep saw a lease of this process run out)."""
        self._wake.set()

    def late(self) -> bool:
        """Holding leases whose last answered round is older than the lease's
        local validity: this replica's own renewals are late (Redis is slow to
        answer it, or the machine is starved), so it has no business judging
        another replica late."""
        if not self._kept or math.isinf(self._leases.ttl):
            return False
        return time.monotonic() - self.answered_at > self._leases.ttl * LOCAL_SHARE

    async def fresh(self, holder: Holder, within: float) -> bool | None:
        """Waits (at most ``within`` seconds, the renew deadline) until
        ``holder.lease`` is valid by the local clock again, asking for a round
        at once: True when it is; False when it was lost (or is no longer
        kept); None when the deadline passed with no answer."""
        deadline = time.monotonic() + within
        while not holder.lease.still_valid():
            kept = self._kept.get(holder.lease.session_id)
            if kept is None or kept.holder is not holder:
                return False
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            if self._round is None:
                self._round = asyncio.Event()
            round_done = self._round
            self._wake.set()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(round_done.wait(), left)
        return True

    def _run(self) -> None:
        """The keeper's thread: a round every ``period``, or at once when a
        writer waits (``fresh``)."""
        while not self._stopped.is_set():
            self._wake.wait(self.period)
            self._wake.clear()
            if self._stopped.is_set():
                return
            with self._lock:
                kept = list(self._kept.values())
            if not kept:
                continue
            sent = time.monotonic()
            try:
                renewed = self._leases.renew_many_blocking([k.holder.lease for k in kept])
            except BackendUnavailable:
                # No answer is not a refusal: the leases are kept and tried
                # again next round (a renewal succeeds even after the key
                # expired, unless another replica took the run over). Till
                # then a run's trace writes wait for a renewal (``fresh``), and
                # its log writes are fenced by the token in Redis.
                continue
            except Exception:  # a bug here must not stop the renewals silently
                log.exception("renewing the run leases failed")
                continue
            lost = self._settle(kept, renewed)
            self.answered_at = max(self.answered_at, sent)
            self.rounds += 1
            self._to_loop(functools.partial(self._after_round, lost))

    def _settle(self, kept: list[_Kept], renewed: list[Lease | None]) -> list[_Kept]:
        lost = []
        with self._lock:
            for item, lease in zip(kept, renewed, strict=True):
                session_id = item.holder.lease.session_id
                if self._kept.get(session_id) is not item:
                    continue  # dropped (or replaced) while the renewal was out
                if lease is None:
                    del self._kept[session_id]
                    lost.append(item)
                elif lease.token == item.holder.lease.token:
                    item.holder.lease = lease
        return lost

    def _after_round(self, lost: list[_Kept]) -> None:
        for item in lost:
            try:
                item.on_lost()
            except Exception:
                log.exception("stopping a run whose lease was lost failed")
        done, self._round = self._round, None
        if done is not None:
            done.set()

    def _to_loop(self, callback: Callable[[], None]) -> None:
        loop = self._loop
        if loop is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop has closed
            loop.call_soon_threadsafe(callback)

    async def close(self) -> None:
        with self._lock:
            self._kept.clear()
        self._stopped.set()
        self._wake.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            # A round in flight ends within its socket timeout; the thread is a
            # daemon, so a shutdown does not wait for a Redis that is gone.
            await asyncio.to_thread(thread.join, 1.0)
