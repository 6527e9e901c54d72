"""SIGTERM and SIGINT for ``omni-grpc serve``, kept by something the loop cannot stall.

The first signal starts the drain (the loop's business: ``signals`` gets it).
From then on the process has a deadline, and a thread of its own enforces it:
``drain timeout + shutdown grace + FORCE_SLACK`` after the first signal, and
``SECOND_SIGNAL_BUDGET + FORCE_SLACK`` after a second one, whichever comes
first; a third signal exits on the spot. When the deadline passes the thread
prints why and ends the process with ``os._exit``, whatever the event loop is
doing (blocked in a callback, waiting on a Redis that never answers, parked
on a future nobody completes). Behind the thread, for an interpreter that
cannot run even that thread (a C call holding the GIL, or the interpreter's
own finalization): ``faulthandler``'s timer, a C thread that needs no GIL,
armed one second later, writes every thread's stack to stderr (where it was
stuck) and exits 1.

The handlers are Python-level (``signal.signal``), not the loop's
(``loop.add_signal_handler``): Python runs them in the main thread between
two bytecodes, or as soon as a blocking system call is interrupted, so they
run while a loop callback is busy, and they hand the loop its part with
``call_soon_threadsafe``.
"""

from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import os
import select
import signal
import threading
import time

# Seconds a second signal leaves the process to record its runs' aborts.
SECOND_SIGNAL_BUDGET = 1.0
# Seconds past its own budget the loop gets before the thread ends the process.
FORCE_SLACK = 1.0
# The exit status of a process whose shutdown did not finish in time.
EXIT_FORCED = 1

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopSignals:
    """Counts SIGTERM/SIGINT, feeds them to ``signals``, keeps the deadline."""

    def __init__(self, signals: asyncio.Queue[signal.Signals], drain_timeout: float, grace: float):
        self.signals = signals
        self.drain_timeout = drain_timeout
        self.grace = grace
        self.count = 0
        self._loop = asyncio.get_running_loop()
        # The deadline (time.monotonic()) and why; written by the handler in
        # the main thread, read by the watchdog, woken through the pipe.
        self._deadline: float | None = None
        self._why = ""
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        self._watchdog = threading.Thread(
            target=self._watch, name="omni-stop-deadline", daemon=True
        )

    def install(self) -> None:
        """For the rest of the process's life: the deadline also covers what
        follows ``serve`` (asyncio.run's cancelling of tasks and joining of
        its executor's threads, the interpreter's joining of threads)."""
        self._watchdog.start()
        for sig in STOP_SIGNALS:
            signal.signal(sig, self._handle)

    @property
    def second(self) -> bool:
        """A second signal came: stop now, not after the drain."""
        return self.count >= 2

    def _handle(self, signum: int, frame: object) -> None:
        self.count += 1
        sig = signal.Signals(signum)
        if self.count == 1:
            self._arm(
                self.drain_timeout + self.grace,
                f"the drain ({self.drain_timeout:g} s) and shutdown ({self.grace:g} s) "
                f"after {sig.name} took longer",
            )
        elif self.count == 2:
            self._arm(SECOND_SIGNAL_BUDGET, f"a second signal ({sig.name}) asked to stop now")
        else:
            _exit(f"a third signal ({sig.name})")
        self._loop.call_soon_threadsafe(self.signals.put_nowait, sig)

    def _arm(self, seconds: float, why: str) -> None:
        deadline = time.monotonic() + seconds + FORCE_SLACK
        if self._deadline is not None and self._deadline <= deadline:
            return
        self._deadline, self._why = deadline, why
        # The backstop, for a process in which no Python code runs any more.
        faulthandler.dump_traceback_later(seconds + FORCE_SLACK + 1.0, exit=True)
        with contextlib.suppress(BlockingIOError):
            os.write(self._wake_w, b"!")

    def _watch(self) -> None:
        while True:
            deadline = self._deadline
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                _exit(self._why)
            ready, _, _ = select.select([self._wake_r], [], [], left)
            if ready:
                os.read(self._wake_r, 64)


def _exit(why: str) -> None:
    # os.write, not print: the main thread may hold sys.stderr's lock.
    with contextlib.suppress(OSError):
        os.write(2, f"omni-grpc stopped before its shutdown finished: {why}\n".encode())
    os._exit(EXIT_FORCED)
