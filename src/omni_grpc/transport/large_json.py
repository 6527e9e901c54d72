"""Large JSON request bodies parsed in another process (#40 item 1).

A JSON parse is one C call that holds the GIL from start to end (orjson and
the stdlib's decoder release nothing), so parsing a 60 MiB body on the event
loop, or in a thread of this process, held every other client, health check
and lease renewal for as long as it took (seconds on a loaded machine). A
body of ``LARGE_BODY_BYTES`` or more is parsed by a worker process instead:
this process writes the body to the worker's pipe and reads the pickled
result back from a thread (the pipe's I/O releases the GIL), and builds the
parsed objects from the pickle (a memory copy, tens of milliseconds for
60 MiB); the parse's CPU time is the worker's own.

The worker is a plain ``python -c`` child (not ``multiprocessing``, whose
spawn runs the parent's ``__main__`` again: ``python -m omni_grpc`` would
start a second server), started on the first large body, one body at a time;
it exits when this process does (its stdin closes). Smaller bodies are parsed
in place, as before.
"""

from __future__ import annotations

import asyncio
import logging
import os
import pickle
import signal
import struct
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import IO, Any

import orjson

LARGE_BODY_BYTES = 1 << 20

log = logging.getLogger(__name__)
_HEAD = struct.Struct(">QQ")  # the parser's pickle, the body (bytes)
_SIZE = struct.Struct(">Q")

Parse = Callable[[bytes | bytearray], Any]


def orjson_loads(body: bytes | bytearray) -> Any:
    """orjson's parse (a top-level function, so the worker can be told it)."""
    return orjson.loads(body)


def _guarded(parse: Parse, body: bytes | bytearray) -> tuple[bool, Any]:
    # An error is sent back as its text alone: a JSON error keeps the whole
    # document in its arguments, which would be pickled back with it.
    try:
        return (True, parse(body))
    except Exception as exc:  # any parser's refusal, as text
        return (False, str(exc) or type(exc).__name__)


def _read_exact(stream: IO[bytes], n: int) -> bytearray:
    out = bytearray(n)
    view = memoryview(out)
    got = 0
    while got < n:
        read = stream.readinto(view[got:])  # type: ignore[attr-defined]
        if not read:
            raise EOFError("the JSON worker's pipe closed")
        got += read
    return out


def _write_all(stream: IO[bytes], data: bytes | bytearray | memoryview) -> None:
    view = memoryview(data)
    while view:
        written = stream.write(view)
        view = view[written or 0 :]


def _serve() -> None:
    """The worker: parse what comes on stdin until it closes."""
    # A terminal's Ctrl-C goes to the whole process group: the server
    # stops, and the worker with it once its stdin closes.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    while True:
        try:
            head_size, body_size = _HEAD.unpack(_read_exact(stdin, _HEAD.size))
        except EOFError:
            return
        parse = pickle.loads(_read_exact(stdin, head_size))
        result = pickle.dumps(_guarded(parse, _read_exact(stdin, body_size)), protocol=5)
        _write_all(stdout, _SIZE.pack(len(result)))
        _write_all(stdout, result)
        stdout.flush()


class _Worker:
    def __init__(self) -> None:
        # The worker imports what this process does (a parser named by its
        # module, from this tree).
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        self.process = subprocess.Popen(
            [sys.executable, "-c", "from omni_grpc.transport.large_json import _serve; _serve()"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            bufsize=0,
            env=env,
        )

    def parse(self, parse: Parse, body: bytes | bytearray) -> tuple[bool, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        head = pickle.dumps(parse)
        _write_all(self.process.stdin, _HEAD.pack(len(head), len(body)) + head)
        _write_all(self.process.stdin, body)
        (size,) = _SIZE.unpack(_read_exact(self.process.stdout, _SIZE.size))
        answer: tuple[bool, Any] = pickle.loads(_read_exact(self.process.stdout, size))
        return answer

    def close(self) -> None:
        self.process.kill()
        self.process.wait()


_worker: _Worker | None = None
_lock = threading.Lock()  # one body at a time through the one worker


def _parse_in_worker(parse: Parse, body: bytes | bytearray) -> tuple[bool, Any]:
    global _worker
    with _lock:
        if _worker is None:
            _worker = _Worker()
        try:
            return _worker.parse(parse, body)
        except (OSError, EOFError):
            # The worker died (killed, out of memory): the next body starts
            # another; this one is parsed here rather than refused.
            log.warning("the JSON worker process exited; parsing a large body in place")
            _worker.close()
            _worker = None
    return _guarded(parse, body)


async def loads(
    body: bytes | bytearray, parse: Parse = orjson_loads, *, large: int = LARGE_BODY_BYTES
) -> Any:
    """``parse(body)``, in the worker process when ``body`` is ``large`` or
    more. ``parse`` must be a module's top-level function. A parse that
    fails raises ``ValueError`` with the parser's message (orjson's
    ``JSONDecodeError`` is a ``ValueError``)."""
    if len(body) < large:
        return parse(body)
    ok, value = await asyncio.to_thread(_parse_in_worker, parse, body)
    if not ok:
        raise ValueError(value)
    return value
