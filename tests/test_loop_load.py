"""The overload measure (``runtime.loop_load``): the busy share of the last
second, so one long turn among idle ones refuses nothing and a loop with no
idle time does (the refusal itself: tests/test_operator_limits.py)."""

from __future__ import annotations

import asyncio
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from omni_grpc.runtime.loop_load import WINDOW, LoopLoad


@given(
    st.lists(
        st.tuples(
            st.floats(min_value=0.001, max_value=0.6),  # wall seconds since the last sample
            st.floats(min_value=0.0, max_value=1.0),  # the share of them the loop was busy
        ),
        min_size=1,
        max_size=200,
    )
)
def test_busy_is_the_share_of_the_last_window(samples: list[tuple[float, float]]) -> None:
    load = LoopLoad()
    now = 0.0
    seen: list[tuple[float, float, float]] = []
    for wall, share in samples:
        now += wall
        load.record(now, wall * share, wall)
        seen.append((now, wall * share, wall))
    recent = [s for s in seen if s[0] > now - WINDOW] or seen[-1:]
    expected = sum(b for _, b, _ in recent) / sum(w for _, _, w in recent)
    assert load.busy == pytest.approx(min(1.0, expected), abs=1e-6)


def test_one_long_turn_among_idle_ones_stays_under_a_limit_a_spinning_loop_passes() -> None:
    load = LoopLoad()
    now = 0.0
    for _ in range(9):  # most of a second, 5 % busy
        now += 0.1
        load.record(now, 0.005, 0.1)
    now += 0.3
    load.record(now, 0.3, 0.3)  # one turn of 300 ms: a large message, say
    assert load.busy < 0.5
    for _ in range(10):  # a second with no idle time
        now += 0.1
        load.record(now, 0.1, 0.1)
    assert load.busy > 0.9


def test_nothing_measured_is_not_busy() -> None:
    assert LoopLoad().busy == 0.0


async def test_a_spinning_loop_is_measured_busy_and_an_idle_one_not() -> None:
    load = LoopLoad()
    watching = asyncio.create_task(load.watch())
    try:
        await asyncio.sleep(1.2)  # idle: waiting on a timer
        idle = load.busy
        until_then = time.perf_counter() + 1.2
        while time.perf_counter() < until_then:
            await asyncio.sleep(0)  # every turn busy, never waiting
        spinning = load.busy
    finally:
        watching.cancel()
    assert idle < 0.5 < spinning, (idle, spinning)
