"""How busy this process's event loop is: the replica's measure of overload,
by which it refuses new runs while it can still tell them so.

A grpc.aio server takes its calls from gRPC's core one at a time, a turn or
two of the event loop each. A loop with no idle time left (every turn runs
the callbacks of hundreds of streams) takes calls about as fast as it
finishes runs; past that, calls queue in core, and core cancels a call the
application has not taken within 30 s (``grpc.server_max_unrequested_time_in_server``)
without the application ever seeing it: a bare CANCELLED. Refusing new runs
while the loop has no idle time keeps it taking calls at once, and a refused
run is told so at once (``Overloaded``: RESOURCE_EXHAUSTED / HTTP 429) with
nothing created.

The measure is the share of the last second that the loop's thread spent
running or ready to run (Linux ``schedstat``: time on a CPU plus time waiting
for one, so a replica starved by other processes counts as busy too; the
thread's CPU time elsewhere). A loop waiting for I/O or timers is idle.
"""

from __future__ import annotations

import asyncio
import collections
import time
from pathlib import Path

# How often the loop is sampled, and over how many seconds its load is taken.
PERIOD = 0.1
WINDOW = 1.0

_SCHEDSTAT = Path("/proc/thread-self/schedstat")


def _busy_seconds() -> float:
    """Seconds the calling thread has run or waited to run, so far."""
    try:
        on_cpu, waiting, _ = _SCHEDSTAT.read_bytes().split()
    except (OSError, ValueError):
        return time.thread_time()
    return (int(on_cpu) + int(waiting)) / 1e9


class LoopLoad:
    """The event loop's recent busy share, sampled by a task of its own."""

    def __init__(self) -> None:
        # (when, busy seconds, wall seconds) per sample, the last WINDOW's.
        self._samples: collections.deque[tuple[float, float, float]] = collections.deque()
        self._busy = 0.0
        self._wall = 0.0

    @property
    def busy(self) -> float:
        """The share (0 to 1) of the last window the loop was busy; 0 until
        it was measured."""
        if self._wall <= 0:
            return 0.0
        return min(1.0, max(0.0, self._busy / self._wall))

    def record(self, now: float, busy: float, wall: float) -> None:
        """One sample: ``busy`` of the ``wall`` seconds up to ``now``."""
        self._samples.append((now, busy, wall))
        self._busy += busy
        self._wall += wall
        while self._samples[0][0] <= now - WINDOW and len(self._samples) > 1:
            _, old_busy, old_wall = self._samples.popleft()
            self._busy -= old_busy
            self._wall -= old_wall

    async def watch(self) -> None:
        """Samples until cancelled (the hub's background work)."""
        loop = asyncio.get_running_loop()
        then, busy_then = loop.time(), _busy_seconds()
        while True:
            await asyncio.sleep(PERIOD)
            now, busy_now = loop.time(), _busy_seconds()
            self.record(now, busy_now - busy_then, now - then)
            then, busy_then = now, busy_now
