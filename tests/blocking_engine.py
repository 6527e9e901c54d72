"""An engine that blocks its server's event loop for good (a hostile one).

For the drain tests: the first run writes ``marker`` and then spins in
Python on the loop's own thread, never yielding, so nothing that depends on
the loop (its signal handlers, its timers, the drain) can run any more. Only
what the process keeps apart from the loop can still stop it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any


class LoopBlockingEngine:
    name = "loop-blocking"

    def __init__(self, marker: str) -> None:
        self.marker = Path(marker)

    async def run(self, input: list[dict[str, Any]], options: Any) -> AsyncIterator[dict[str, Any]]:
        self.marker.write_text("blocking", encoding="utf-8")
        while True:  # the GIL is held too, but for its switch interval
            pass
        yield {}  # an async generator, as engines are


def create(marker: str) -> LoopBlockingEngine:
    return LoopBlockingEngine(marker)
