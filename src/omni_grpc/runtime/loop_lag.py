"""How far behind this process's event loop runs: the replica's measure of
overload, by which it refuses new runs before it is too late to tell.

A grpc.aio server takes its calls from gRPC's core one at a time, each after
a turn of the event loop; a call the application has not taken within 30 s
(core's ``grpc.server_max_unrequested_time_in_server``) is CANCELLED by core
without the application ever seeing it. A replica whose loop is saturated
(each turn runs the callbacks of hundreds of streams) takes calls too slowly
and so loses some as a bare CANCELLED. Refusing new runs while the loop is
behind keeps its turns short, so calls are taken, and refused runs are told
at once (``Overloaded``: RESOURCE_EXHAUSTED / HTTP 429) with nothing created.

The measure is the lateness of a short periodic sleep, averaged over a
window: a single long turn (a garbage collection, the process descheduled on
a busy machine) does not refuse anything; a loop that stays behind does.
"""

from __future__ import annotations

import asyncio
import collections

# How often the loop is sampled, and over how many seconds the lateness is
# averaged.
PERIOD = 0.02
WINDOW = 1.0


class LoopLag:
    """The event loop's recent lateness, sampled by a task of its own."""

    def __init__(self) -> None:
        # (when, how late) per sample, the last WINDOW seconds of them.
        self._samples: collections.deque[tuple[float, float]] = collections.deque()
        self._late_sum = 0.0

    @property
    def behind(self) -> float:
        """The mean lateness, in seconds, of the samples of the last window
        (0 until there are any)."""
        if not self._samples:
            return 0.0
        return self._late_sum / len(self._samples)

    def record(self, now: float, late: float) -> None:
        self._samples.append((now, late))
        self._late_sum += late
        while self._samples and self._samples[0][0] < now - WINDOW:
            _, old = self._samples.popleft()
            self._late_sum -= old
        if not self._samples:  # pragma: no cover - the new sample is always kept
            self._late_sum = 0.0

    async def watch(self) -> None:
        """Samples until cancelled (the hub's background work)."""
        loop = asyncio.get_running_loop()
        while True:
            start = loop.time()
            await asyncio.sleep(PERIOD)
            now = loop.time()
            self.record(now, max(0.0, now - start - PERIOD))
