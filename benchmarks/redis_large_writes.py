"""How long one large write holds Redis (#27): what decided how large bodies
are stored (``runtime/redis/large_bodies.py``).

A redis-server as the deployment guide configures it (AOF, ``appendfsync
always``); one client writes a message of ``--mib`` MiB the ways the event
log could, while another PINGs every 5 ms. The figure is the slowest PING
during the write: what every other command (a lease renewal, a stream read,
another session's write) waits meanwhile.

    .venv/bin/python benchmarks/redis_large_writes.py [--mib 60] [--repeat 2]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

sys.path.insert(0, str(Path(__file__).parent))
from scale_out import start_redis  # benchmarks/scale_out.py

MiB = 1 << 20
XADD = "return redis.call('XADD', KEYS[1], '*', 'd', ARGV[1], 'p', ARGV[2])"
Write = Callable[[Any, bytes], Awaitable[None]]


async def one_command_json_and_proto(r: Any, body: bytes) -> None:
    await r.eval(XADD, 1, "s", body, body)


async def one_command_json_only(r: Any, body: bytes) -> None:
    await r.eval(XADD, 1, "s", body, b"")


def chunks(size: int, *, pipelined: bool) -> Write:
    async def write(r: Any, body: bytes) -> None:
        view = memoryview(body)
        if pipelined:
            pipe = r.pipeline(transaction=False)
            for i in range(0, len(body), size):
                pipe.hset("b", str(i), view[i : i + size])
            await pipe.execute()
        else:
            for i in range(0, len(body), size):
                await r.hset("b", str(i), view[i : i + size])
        await r.eval(XADD, 1, "s", b"ref", b"")

    return write


async def measure(url: str, write: Write, body: bytes) -> tuple[float, float]:
    """(seconds the write took, the slowest PING meanwhile)."""
    writer, pinger = aioredis.Redis.from_url(url), aioredis.Redis.from_url(url)
    await writer.ping()
    await pinger.ping()
    done = asyncio.Event()
    worst = 0.0

    async def ping() -> None:
        nonlocal worst
        while not done.is_set():
            start = time.perf_counter()
            await pinger.ping()
            worst = max(worst, time.perf_counter() - start)
            await asyncio.sleep(0.005)

    task = asyncio.create_task(ping())
    start = time.perf_counter()
    await write(writer, body)
    took = time.perf_counter() - start
    done.set()
    await task
    await writer.flushall()
    await writer.aclose()
    await pinger.aclose()
    return took, worst


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, default=60)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    body = b"p" * (args.mib * MiB)
    ways: list[tuple[str, Write]] = [
        ("one command, JSON and protobuf", one_command_json_and_proto),
        ("one command, JSON only", one_command_json_only),
        ("1 MiB chunks, pipelined", chunks(MiB, pipelined=True)),
        ("1 MiB chunks, one command each", chunks(MiB, pipelined=False)),
    ]
    print(f"| {args.mib} MiB message, written as | write s | slowest PING meanwhile, s |")
    print("|---|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = start_redis(Path(tmp))
        try:
            for name, write in ways:
                runs = [await measure(url, write, body) for _ in range(args.repeat)]
                took = max(t for t, _ in runs)
                worst = max(w for _, w in runs)
                print(f"| {name} | {took:.2f} | {worst:.2f} |", flush=True)
        finally:
            proc.terminate()
            proc.wait()


if __name__ == "__main__":
    asyncio.run(main())
