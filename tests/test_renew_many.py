"""``RunLease.renew_many``, the lease keeper's one round trip per round, on
both backends: it renews what is still held and reports what is not, with
the same script and keys as ``renew`` (a renewal script that grew a key once
left the batched call a key short, and every batched round failed on Redis
while the sweep's single renewals hid it)."""

from __future__ import annotations

from collections.abc import Callable

from omni_grpc.runtime.backend import Backend


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
