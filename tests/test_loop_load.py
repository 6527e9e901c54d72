"""The overload measure (``runtime.loop_lag``): the mean lateness of the last
second's samples, so one long turn refuses nothing and a loop that stays
behind does (the refusal itself: tests/test_operator_limits.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from omni_grpc.runtime.loop_lag import WINDOW, LoopLag


@given(
    st.lists(
        st.tuples(
            st.floats(min_value=0.0, max_value=0.6),  # seconds since the last sample
            st.floats(min_value=0.0, max_value=2.0),  # how late it was
        ),
        min_size=1,
        max_size=200,
    )
)
def test_behind_is_the_mean_lateness_of_the_last_window(samples: list[tuple[float, float]]) -> None:
    lag = LoopLag()
    now = 0.0
    seen: list[tuple[float, float]] = []
    for gap, late in samples:
        now += gap
        lag.record(now, late)
        seen.append((now, late))
    recent = [late for when, late in seen if when >= now - WINDOW]
    assert lag.behind == pytest.approx(sum(recent) / len(recent), abs=1e-9)


def test_one_long_turn_among_short_ones_stays_under_a_limit_a_stuck_loop_passes() -> None:
    lag = LoopLag()
    now = 0.0
    for _ in range(49):  # a second of 20 ms samples, each 1 ms late
        now += 0.021
        lag.record(now, 0.001)
    now += 0.3
    lag.record(now, 0.28)  # one turn of 300 ms: a garbage collection, say
    assert lag.behind < 0.025
    for _ in range(4):  # turns of 300 ms, one after another
        now += 0.3
        lag.record(now, 0.28)
    assert lag.behind > 0.25


def test_nothing_measured_is_not_behind() -> None:
    assert LoopLag().behind == 0.0
