"""Large JSON request bodies parsed in another process (#40 item 1).

A JSON parse is one C call that holds the GIL from start to end (orjson and
the stdlib's decoder release nothing), so parsing a 60 MiB body on the event
loop, or in a thread of this process, held every other client, health check
and lease renewal for as long as it took (seconds on a loaded machine). A
body of ``LARGE_BODY_BYTES`` or more is parsed by a worker process instead:
what the loop's process still does is copy the body into a pipe and build
the parsed objects from their pickle (memory copies, tens of milliseconds
for 60 MiB), while the worker's CPU time is its own.

The worker is started on the first large body (``spawn``: a fork of a
process running grpcio's threads is unsafe) and parses one body at a time;
it exits when this process does (its pipe closes). Smaller bodies are
parsed in place, as before.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import threading
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

import orjson

LARGE_BODY_BYTES = 1 << 20

_pool: ProcessPoolExecutor | None = None
_pool_lock = threading.Lock()


def orjson_loads(body: bytes | bytearray) -> Any:
    """orjson's parse (a top-level function, so a worker can be handed it)."""
    return orjson.loads(body)


def _guarded(parse: Callable[[bytes | bytearray], Any], body: bytes | bytearray) -> Any:
    # An error is sent back as its text alone: a JSON error keeps the whole
    # document in its arguments, which would be pickled back with it.
    try:
        return (True, parse(body))
    except Exception as exc:  # any parser's refusal, as text
        return (False, str(exc) or type(exc).__name__)


def _executor() -> ProcessPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ProcessPoolExecutor(
                max_workers=1, mp_context=multiprocessing.get_context("spawn")
            )
        return _pool


def _forget(pool: ProcessPoolExecutor) -> None:
    global _pool
    with _pool_lock:
        if _pool is pool:
            _pool = None
    pool.shutdown(wait=False, cancel_futures=True)


async def loads(
    body: bytes | bytearray,
    parse: Callable[[bytes | bytearray], Any] = orjson_loads,
    *,
    large: int = LARGE_BODY_BYTES,
) -> Any:
    """``parse(body)``, in the worker process when ``body`` is ``large`` or
    more. ``parse`` must be a module's top-level function. A parse that
    fails raises ``ValueError`` with the parser's message (orjson's
    ``JSONDecodeError`` is a ``ValueError``)."""
    if len(body) < large:
        return parse(body)
    pool = _executor()
    try:
        ok, value = await asyncio.get_running_loop().run_in_executor(pool, _guarded, parse, body)
    except BrokenProcessPool:
        # The worker died (killed, out of memory): the next body starts
        # another; this one is parsed in place rather than refused.
        _forget(pool)
        ok, value = _guarded(parse, body)
    if not ok:
        raise ValueError(value)
    return value
