"""Large JSON bodies are parsed in another process (transport/large_json.py, #40).

One JSON parse is one C call holding the GIL, so a 60 MiB body parsed on the
event loop (or a thread) held every other client of the process.
"""

from __future__ import annotations

import json
import os
import signal

import orjson
import pytest

from omni_grpc.transport import large_json
from omni_grpc.transport.connect import protojson

MiB = 1 << 20


def parsed_where(body: bytes | bytearray) -> int:
    """The process that parsed ``body`` (a top-level function, as a worker needs)."""
    return os.getpid()


def large_body() -> bytes:
    return json.dumps({"prompt": "é" + "x" * (2 * MiB), "n": [1, 2.5, None, True]}).encode()


async def test_a_large_body_is_parsed_in_another_process_and_a_small_one_here() -> None:
    assert await large_json.loads(b'{"a": 1}', parsed_where) == os.getpid()
    assert await large_json.loads(large_body(), parsed_where) != os.getpid()


async def test_the_worker_parses_as_orjson_does() -> None:
    body = large_body()
    assert await large_json.loads(body) == orjson.loads(body)
    assert await large_json.loads(bytearray(body)) == orjson.loads(body)


async def test_a_refusal_is_a_value_error_with_the_parser_s_message() -> None:
    bad = large_body()[:-1]
    with pytest.raises(orjson.JSONDecodeError) as here:
        orjson.loads(bad)
    with pytest.raises(ValueError) as there:
        await large_json.loads(bad)
    assert str(there.value) == str(here.value)
    # ProtoJSON's rules (a key given twice, UTF-8) hold in the worker too.
    twice = b'{"a": "' + b"x" * (2 * MiB) + b'", "a": 1}'
    with pytest.raises(ValueError, match="duplicate key a"):
        await large_json.loads(twice, protojson.load_bytes)
    with pytest.raises(ValueError, match="utf-8"):
        await large_json.loads(b'"\xff' + b"x" * (2 * MiB) + b'"', protojson.load_bytes)


async def test_a_worker_that_died_is_replaced() -> None:
    body = large_body()
    worker = await large_json.loads(body, parsed_where)
    os.kill(worker, signal.SIGKILL)
    # The parse that finds it dead is done in place; the next gets a new worker.
    assert await large_json.loads(body) == orjson.loads(body)
    assert await large_json.loads(body, parsed_where) not in (worker, os.getpid())
