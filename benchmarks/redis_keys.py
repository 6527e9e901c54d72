"""Redis keys and bytes per session, live, at rest and after it ends (#30 item 8).

``python benchmarks/redis_keys.py [--sessions N]`` starts a redis-server of its
own (AOF, ``noeviction``, as the guide says) and a hub on the Redis backend
with the demo engine, runs one task in each of N sessions, then measures,
per session:

* **live**: just after its run (the event stream and its meta are kept for
  the idle reclaim);
* **at rest**: after the idle reclaim expired the stream (30 minutes in
  production, 2 s here: the same code path with a shorter TTL);
* **ended**: after half the sessions were deleted (DeleteSession) and the
  other half expired (``--session-ttl``).

Keys are counted by name (every key of a session carries its id), bytes are
Redis's ``used_memory`` above what it was with the hub connected and no
session, divided by N (allocator pages and client buffers move it a little
whatever the keys), and the sum
of ``MEMORY USAGE`` of the session's keys (the index set's members are in
``used_memory`` only).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

import redis.asyncio as aioredis
from scale_out import start_redis  # benchmarks/scale_out.py, beside this file

from omni_grpc import protocol
from omni_grpc.convert import message_from_dict
from omni_grpc.engines.demo import DemoEngine
from omni_grpc.runtime.hub import Hub
from omni_grpc.runtime.interface import RunRequest
from omni_grpc.runtime.limits import Limits
from omni_grpc.runtime.redis import redis_backend

IDLE_TTL = 2.0


async def one_run(hub: Hub) -> str:
    request = RunRequest(input=[message_from_dict(protocol.user_text("hello"))])
    session_id, sub = await hub.run(request)
    async for event in sub:
        ev = event.server_event
        if ev is not None and ev.HasField("task_state") and ev.task_state.state == 1:
            break
    return session_id


async def measure(
    admin: aioredis.Redis, sessions: list[str], base: int
) -> tuple[float, float, float]:
    """Keys per session, used_memory bytes per session, MEMORY USAGE per session."""
    ids = set(sessions)
    keys = 0
    usage = 0
    async for key in admin.scan_iter(count=1000):
        name = key.decode()
        if any(part in ids for part in _ids_in(name)):
            keys += 1
            usage += await admin.memory_usage(key) or 0
    used = (await admin.info("memory"))["used_memory"] - base
    n = len(sessions)
    return keys / n, used / n, usage / n


def _ids_in(name: str) -> list[str]:
    # omni:{<id>}:part and omni:session:<id>
    if "{" in name:
        return [name.split("{", 1)[1].split("}", 1)[0]]
    return [name.rsplit(":", 1)[-1]]


def report(sessions: int, rows: list[tuple[str, float, float, float]]) -> None:
    print(f"{sessions} sessions, one demo run each; per session:\n")
    print("| state | keys | used_memory bytes | MEMORY USAGE bytes |")
    print("| --- | --- | --- | --- |")
    for state, keys, used, usage in rows:
        print(f"| {state} | {keys:.2f} | {used:,.0f} | {usage:,.0f} |", flush=True)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=1000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "redis").mkdir()
        redis_proc, url = start_redis(root / "redis")
        admin = aioredis.Redis.from_url(url)
        try:
            backend = redis_backend(url, idle_ttl=IDLE_TTL)
            limits = Limits(max_sessions=args.sessions + 1, max_runs=64)
            hub = Hub(DemoEngine(), root / "data", backend=backend, limits=limits)
            await hub.start()
            # After the hub connected: its connections and scripts are not
            # per session.
            base = (await admin.info("memory"))["used_memory"]
            sessions: list[str] = []
            gate = asyncio.Semaphore(16)

            async def run() -> None:
                async with gate:
                    sessions.append(await one_run(hub))

            await asyncio.gather(*(run() for _ in range(args.sessions)))
            print("runs done; waiting for the idle reclaim", file=sys.stderr, flush=True)
            rows = [("live", *await measure(admin, sessions, base))]
            while any([k async for k in admin.scan_iter(match="*:events", count=1000)]):
                await asyncio.sleep(0.5)  # the idle reclaim's TTL, polled
            rows.append(("at rest", *await measure(admin, sessions, base)))
            print("at rest; ending the sessions", file=sys.stderr, flush=True)
            half = len(sessions) // 2
            for session_id in sessions[:half]:
                await hub.delete_session(session_id)
            # The other half expires: a second replica whose --session-ttl
            # they are all past runs the sweep.
            sweeper_backend = redis_backend(url, idle_ttl=IDLE_TTL)
            sweeper = Hub(
                DemoEngine(), root / "data", backend=sweeper_backend,
                limits=Limits(session_ttl=0.001),
            )  # fmt: skip
            await sweeper.start()  # its expiry loop deletes them
            while await backend.index.list():
                await asyncio.sleep(0.2)  # polling a condition
            rows.append(
                ("ended (half deleted, half expired)", *await measure(admin, sessions, base))
            )
            report(args.sessions, rows)
            for closing in (sweeper.shutdown(), sweeper_backend.aclose(), hub.shutdown()):
                try:
                    await asyncio.wait_for(closing, 30)
                except TimeoutError:
                    print("a hub's shutdown took over 30 s", file=sys.stderr, flush=True)
            await backend.aclose()
        finally:
            await admin.aclose()
            redis_proc.terminate()
            redis_proc.wait()


if __name__ == "__main__":
    asyncio.run(main())
