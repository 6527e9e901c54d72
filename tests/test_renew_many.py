"""``RunLease.renew_many``, the lease keeper's one round trip per round, on
both backends: it renews what is still held and reports what is not, with
the same script and keys as ``renew`` (a renewal script that grew a key once
left the batched call a key short, and every batched round failed on Redis
while the sweep's single renewals hid it)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from omni_grpc.runtime.backend import Backend
from omni_grpc.runtime.redis.run_lease import RedisRunLease


async def test_renew_many_renews_held_leases_and_reports_lost_ones(
    make_backend: Callable[..., Backend],
) -> None:
    backend = make_backend()
    leases = backend.leases
    held = [await leases.acquire(f"session-renew-many-{i}", "replica-a") for i in range(3)]
    assert all(lease is not None for lease in held)
    kept = [lease for lease in held if lease is not None]
    renewed = await leases.renew_many(kept)
    assert [r is not None for r in renewed] == [True, True, True]
    for before, after in zip(kept, renewed, strict=True):
        assert after is not None and after.token == before.token
        assert after.valid_until >= before.valid_until
    # A released lease is no longer held: its renewal says so, the others go on.
    assert await leases.release(kept[1])
    again = await leases.renew_many(kept)
    assert [r is not None for r in again] == [True, False, True]
    # The same answers as one renewal at a time.
    singles = [await leases.renew(lease) for lease in kept]
    assert [r is not None for r in singles] == [True, False, True]
    # And from the keeper's thread, on its own blocking connection.
    blocking = await asyncio.to_thread(leases.renew_many_blocking, kept)
    assert [r is not None for r in blocking] == [True, False, True]


async def test_a_take_over_is_refused_once_the_beat_moved(
    make_backend: Callable[..., Backend],
) -> None:
    """The sweep takes over a run whose beat it saw stand still: a renewal
    between its look and its take-over (the owner was only late) wins."""
    backend = make_backend()
    leases = backend.leases
    lease = await leases.acquire("session-beat-0", "replica-a")
    assert lease is not None
    runs = await leases.open_runs()
    if not runs:  # the memory backend: leases never run out, nothing to take
        assert await leases.take_over("session-beat-0", "replica-b") is None
        return
    seen = runs["session-beat-0"]
    assert seen.leased
    assert await leases.renew(lease) is not None
    moved = (await leases.open_runs())["session-beat-0"]
    assert moved.count > seen.count
    # The lease is there: no take-over whatever the beat.
    assert await leases.take_over("session-beat-0", "replica-b", moved.count) is None
    # The lease runs out (its key goes, as at its expiry): a take-over with
    # the beat seen before the renewal is refused, one with the current beat
    # is not, and names the replica that held the run.
    assert isinstance(leases, RedisRunLease)
    conn = leases._conn  # the test's way to make the lease run out at once
    await conn.commands.delete(conn.session_key("session-beat-0", "lease"))
    assert await leases.take_over("session-beat-0", "replica-b", seen.count) is None
    taken = await leases.take_over("session-beat-0", "replica-b", moved.count)
    assert taken is not None and taken.token > lease.token
    assert taken.taken_from == "replica-a"
