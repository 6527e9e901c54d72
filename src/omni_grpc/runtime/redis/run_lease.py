"""The run lease on Redis: a claim with a fencing token (scripts in ``scripts``)."""

from __future__ import annotations

import time
from dataclasses import replace

from omni_grpc.runtime.errors import SessionNotFound
from omni_grpc.runtime.redis import scripts
from omni_grpc.runtime.redis.connection import RedisConnection, unavailable_on_failure
from omni_grpc.runtime.redis.session_index import record_key
from omni_grpc.runtime.run_lease import LOCAL_SHARE, Beat, Lease, LeaseOwner

# A lease counts as ours for this much less than its TTL: room for the clock
# of this process and Redis's to disagree a little.
_SAFETY = LOCAL_SHARE


class RedisRunLease:
    def __init__(self, conn: RedisConnection, ttl: float) -> None:
        if ttl <= 0:
            raise ValueError("the lease TTL must be positive")
        self._conn = conn
        self._ttl = ttl
        self._ttl_ms = max(1, int(ttl * 1000))
        r = conn.commands
        self._acquire = r.register_script(scripts.ACQUIRE)
        self._renew = r.register_script(scripts.RENEW)
        # The keeper thread's own blocking connection (``renew_many_blocking``).
        self._renewals = conn.renewals()
        self._renew_blocking = self._renewals.register_script(scripts.RENEW)
        self._release = r.register_script(scripts.RELEASE)
        self._release_claim = r.register_script(scripts.RELEASE_CLAIM)
        self._take_over = r.register_script(scripts.TAKE_OVER)
        self._runs = conn.global_key("runs")

    @property
    def ttl(self) -> float:
        return self._ttl

    def _renew_keys(self, session_id: str) -> list[str]:
        """RENEW's keys, for every renewal alike (one home)."""
        return [*self._keys(session_id), self._holder(session_id), self._beat(session_id)]

    def _keys(self, session_id: str) -> list[str]:
        k = self._conn.session_key
        return [k(session_id, "fence"), k(session_id, "lease"), k(session_id, "run")]

    def _holder(self, session_id: str) -> str:
        return self._conn.session_key(session_id, "holder")

    def _beat(self, session_id: str) -> str:
        return self._conn.session_key(session_id, "beat")

    def _lease(self, session_id: str, owner: str, token: int, sent: float) -> Lease:
        return Lease(session_id, owner, token, sent + self._ttl * _SAFETY)

    async def acquire(self, session_id: str, owner: str) -> Lease | None:
        return await self._claim(session_id, owner, "")

    async def claim(self, session_id: str, owner: str, *, new: bool = False) -> Lease | None:
        return await self._claim(session_id, owner, "new" if new else "live")

    async def _claim(self, session_id: str, owner: str, check: str) -> Lease | None:
        sent = time.monotonic()
        keys = [*self._keys(session_id), self._runs, self._holder(session_id)]
        with unavailable_on_failure():
            token = int(
                await self._acquire(
                    keys=[*keys, self._beat(session_id), record_key(self._conn, session_id)],
                    args=[owner, self._ttl_ms, session_id, check],
                )
            )
        if token < 0:
            raise SessionNotFound(session_id)
        return self._lease(session_id, owner, token, sent) if token else None

    async def renew(self, lease: Lease) -> Lease | None:
        sent = time.monotonic()
        with unavailable_on_failure():
            ok = await self._renew(
                keys=self._renew_keys(lease.session_id),
                args=[str(lease.token), lease.owner, self._ttl_ms],
            )
        return self._lease(lease.session_id, lease.owner, lease.token, sent) if int(ok) else None

    async def renew_many(self, leases: list[Lease]) -> list[Lease | None]:
        if not leases:
            return []
        sent = time.monotonic()
        with unavailable_on_failure():
            pipe = self._conn.commands.pipeline(transaction=False)
            for lease in leases:
                await self._renew(
                    keys=self._renew_keys(lease.session_id),
                    args=[str(lease.token), lease.owner, self._ttl_ms],
                    client=pipe,
                )
            found = await pipe.execute()
        return [
            self._lease(lease.session_id, lease.owner, lease.token, sent) if int(ok) else None
            for lease, ok in zip(leases, found, strict=True)
        ]

    def renew_many_blocking(self, leases: list[Lease]) -> list[Lease | None]:
        if not leases:
            return []
        sent = time.monotonic()
        with unavailable_on_failure():
            pipe = self._renewals.pipeline(transaction=False)
            for lease in leases:
                self._renew_blocking(
                    keys=self._renew_keys(lease.session_id),
                    args=[str(lease.token), lease.owner, self._ttl_ms],
                    client=pipe,
                )
            found = pipe.execute()
        return [
            self._lease(lease.session_id, lease.owner, lease.token, sent) if int(ok) else None
            for lease, ok in zip(leases, found, strict=True)
        ]

    async def release(self, lease: Lease) -> bool:
        with unavailable_on_failure():
            ok = await self._release(
                keys=[*self._keys(lease.session_id), self._runs, self._holder(lease.session_id)],
                args=[str(lease.token), lease.session_id],
            )
        return bool(int(ok))

    async def release_claim(self, session_id: str, owner: str, keep: int | None = None) -> bool:
        with unavailable_on_failure():
            ok = await self._release_claim(
                keys=[*self._keys(session_id), self._runs, self._holder(session_id)],
                args=[owner, session_id, "" if keep is None else str(keep)],
            )
        return bool(int(ok))

    async def owner(self, session_id: str) -> LeaseOwner | None:
        with unavailable_on_failure():
            value = await self._conn.reads.get(self._conn.session_key(session_id, "lease"))
        if value is None:
            return None
        replica, token = value.decode().rsplit("|", 1)
        return LeaseOwner(replica, int(token))

    async def running(self, session_ids: list[str]) -> set[str]:
        if not session_ids:
            return set()
        with unavailable_on_failure():
            pipe = self._conn.reads.pipeline(transaction=False)
            for sid in session_ids:
                pipe.exists(self._conn.session_key(sid, "run"))
            found = await pipe.execute()
        return {sid for sid, n in zip(session_ids, found, strict=True) if n}

    async def orphans(self) -> list[str]:
        with unavailable_on_failure():
            members = sorted(m.decode() for m in await self._conn.reads.smembers(self._runs))
            if not members:
                return []
            pipe = self._conn.reads.pipeline(transaction=False)
            for sid in members:
                pipe.exists(self._conn.session_key(sid, "run"))
                pipe.exists(self._conn.session_key(sid, "lease"))
            flags = await pipe.execute()
        out = []
        stale = []
        for i, sid in enumerate(members):
            has_run, has_lease = flags[2 * i], flags[2 * i + 1]
            if has_run and not has_lease:
                out.append(sid)
            elif not has_run:
                stale.append(sid)
        if stale:
            with unavailable_on_failure():
                await self._conn.commands.srem(self._runs, *stale)
        return out

    async def open_runs(self) -> dict[str, Beat]:
        with unavailable_on_failure():
            members = sorted(m.decode() for m in await self._conn.reads.smembers(self._runs))
            if not members:
                return {}
            pipe = self._conn.reads.pipeline(transaction=False)
            for sid in members:
                pipe.exists(self._conn.session_key(sid, "run"))
                pipe.exists(self._conn.session_key(sid, "lease"))
                pipe.get(self._beat(sid))
            found = await pipe.execute()
        out = {}
        for i, sid in enumerate(members):
            has_run, has_lease, beat = found[3 * i : 3 * i + 3]
            if has_run:
                out[sid] = Beat(int(beat or 0), bool(has_lease))
        return out

    async def take_over(self, session_id: str, owner: str, beat: int | None = None) -> Lease | None:
        sent = time.monotonic()
        with unavailable_on_failure():
            reply = await self._take_over(
                keys=[*self._keys(session_id), self._holder(session_id), self._beat(session_id)],
                args=[owner, self._ttl_ms, "" if beat is None else str(beat)],
            )
        if not int(reply[0]):
            return None
        lease = self._lease(session_id, owner, int(reply[0]), sent)
        if reply[1]:
            ago = int(reply[2]) / 1000
            lease = replace(
                lease, taken_from=reply[1].decode(), renewed_ago=ago if ago >= 0 else None
            )
        return lease
