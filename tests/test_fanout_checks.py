"""The fan-out's per-write checks skip subscribers far from both limits
without computing their level (``Fanout._press_next``, ``overflowing``): the
subscribers they pick are the ones the full checks pick, whatever the
backlogs and the events in flight."""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

from omni_grpc.runtime.events import EventBody, HubEvent
from omni_grpc.runtime.fanout import HIGH_WATER, Fanout

MAX_COUNT, MAX_UNITS = 50, 4000

backlogs = st.lists(
    st.tuples(
        st.lists(st.integers(min_value=0, max_value=1200), max_size=70),  # event sizes
        st.booleans(),  # lagging
    ),
    min_size=1,
    max_size=8,
)
in_flight = st.tuples(st.integers(0, 60), st.integers(0, 5000))


def event(seq: int, size: int) -> HubEvent:
    body = EventBody(None, None, b"x" * size, encoded="message", counted=size)
    return HubEvent(seq, f"e-{seq}", body, True)


@settings(max_examples=300, deadline=None)
@given(backlogs, in_flight)
def test_the_subscriber_pressed_and_those_overflowing_are_the_full_checks_ones(
    subs: list[tuple[list[int], bool]], extra: tuple[int, int]
) -> None:
    async def check() -> None:
        fanout = Fanout(MAX_COUNT, MAX_UNITS, in_flight=lambda: extra)
        made = []
        for sizes, lagging in subs:
            sub = fanout.add()
            sub.start([event(i + 1, size) for i, size in enumerate(sizes)], 0, None)
            sub.lagging = lagging
            made.append(sub)
        full = [s for s in made if not s.lagging and s.level(extra) >= HIGH_WATER]
        fanout.press()
        if full:  # the fullest (any of those as full, on a tie)
            assert fanout.pressed_by in full
            assert fanout.pressed_by.level(extra) == max(s.level(extra) for s in full)
        else:
            assert fanout.pressed_by is None
        assert set(fanout.overflowing()) == {s for s in made if s.over_window()}
        fanout.end()

    asyncio.run(check())
