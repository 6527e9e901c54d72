"""Waiting on a condition instead of sleeping for a guessed time.

The timeout is only a failure guard: a passing test never waits for it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


async def until(condition: Callable[[], object], what: str, timeout: float = 30.0) -> None:
    """Returns as soon as ``condition()`` is true; fails naming ``what``."""
    try:
        async with asyncio.timeout(timeout):
            while not condition():
                await asyncio.sleep(0.005)  # yield to the side being waited for
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None


def wait_for(check: Callable[[], bool], what: str, limit: float = 30) -> None:
    """``until`` for a test outside an event loop (one that drives processes)."""
    deadline = time.monotonic() + limit
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)
