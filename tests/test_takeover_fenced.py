"""A take-over's close fenced by another take-over of the same run (#40 item 2).

Under load a close's lease can lapse while it reads the dead owner's trace;
another replica's sweep then takes the run over, and the first close is
fenced. That close is not a failure to retry (the other replica's close ends
the run): it is logged as a warning, without a traceback, and not put off
for a retry; any other failure still is.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

import pytest

from omni_grpc.engines.demo import DemoEngine
from omni_grpc.runtime.backend import memory_backend
from omni_grpc.runtime.errors import Fenced
from omni_grpc.runtime.hub import Hub
from omni_grpc.runtime.run_lease import Beat


async def test_a_close_fenced_by_another_take_over_is_left_to_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    hub = Hub(DemoEngine(), tmp_path / "data")
    recovery = hub.recovery
    failure: Exception = Fenced("s1", 4)

    async def close_orphan(session_id: str, beat: int | None = None) -> None:
        raise failure

    monkeypatch.setattr(recovery, "close_orphan", close_orphan)
    with caplog.at_level(logging.WARNING):
        await recovery._close_one("s1", 3, 0)
    assert "s1" not in recovery._backoff
    assert [r.levelno for r in caplog.records] == [logging.WARNING], caplog.text
    assert "taken over from this close" in caplog.text
    assert caplog.records[0].exc_info is None

    caplog.clear()
    failure = RuntimeError("a bug")
    with caplog.at_level(logging.WARNING):
        await recovery._close_one("s1", 3, 0)
    assert "s1" in recovery._backoff  # tried again later
    assert [r.levelno for r in caplog.records] == [logging.ERROR], caplog.text


class StillLeases:
    """One open run whose owner is gone: no lease, a beat that never moves.
    ``take_over`` records the sweep at which it was first called."""

    ttl = 1.0

    def __init__(self, stall: float) -> None:
        self.stall = stall
        self.sweeps = 0
        self.taken_at: int | None = None

    async def open_runs(self) -> dict[str, Beat]:
        self.sweeps += 1
        if self.sweeps == 1:
            # This replica's loop is starved during its next wait between
            # sweeps (the stall itself, not a wait for a condition).
            asyncio.get_running_loop().call_later(0.05, time.sleep, self.stall)
        return {"s1": Beat(count=7, leased=False)}

    async def take_over(self, session_id: str, owner: str, beat: int | None = None) -> None:
        if self.taken_at is None:
            self.taken_at = self.sweeps


async def test_a_sweep_that_woke_late_watches_again_before_taking_over(tmp_path: Path) -> None:
    """The sweep's grace here is 0.75 s (TTL 1 s less the 0.25 s interval).
    Its loop stalls 1.2 s right after the first sweep saw the run: by its
    clock the beat then stood still for longer than the grace, but this
    replica was the late one, so the second sweep only watches again."""
    backend = memory_backend()
    leases = StillLeases(stall=1.2)
    backend.leases = leases  # type: ignore[assignment]
    backend.sweep_interval = 0.25
    hub = Hub(DemoEngine(), tmp_path / "data", backend=backend)
    sweep = asyncio.create_task(hub.recovery.sweep_loop())
    try:
        async with asyncio.timeout(60):
            while leases.taken_at is None:
                await asyncio.sleep(0.02)  # polling a condition
    finally:
        sweep.cancel()
    # Taken over (the owner is gone), but not by the sweep right after the stall.
    assert leases.taken_at > 2, leases.taken_at
