"""The runtime alone: CPU per event of a demo-engine task read by one
subscriber in process (no transport), on the memory backend and on Redis.

What a transport adds is ``grpc_stream.py``'s business; this isolates the
engine, the hub's once-per-event work (encoding, the guard, the trace, the
log, the fan-out) and one subscription's reads, which is what a server with
one subscriber spends beside gRPC's own per-message work.

    .venv/bin/python benchmarks/hub_events.py [--repeat 100] [--rounds 3]
        [--backends memory,redis] [--profile FILE]

Each round runs one task per backend (after one warm-up task each) and
measures this process's CPU (all threads: the trace appends run on the
recorder's) over the task; the best round is printed. ``--profile`` writes a
cProfile of the memory backend's rounds (event loop thread) to FILE.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import sys
import tempfile
import time
from pathlib import Path

from grpc_stream import start_redis  # benchmarks/grpc_stream.py

from omni_grpc import protocol
from omni_grpc.convert import message_from_dict
from omni_grpc.engines.demo import DemoEngine
from omni_grpc.runtime.backend import Backend, memory_backend
from omni_grpc.runtime.bodies import is_task_end
from omni_grpc.runtime.hub import Hub, RunRequest


async def one_task(hub: Hub, session_id: str | None) -> tuple[str, int, float]:
    """A task read to its end; its session, its events, the process CPU it took."""
    request = RunRequest(input=[message_from_dict(protocol.user_text("go"))], session_id=session_id)
    before = time.process_time()
    session, sub = await hub.run(request)
    count = 0
    while (event := await sub.next()) is not None:
        count += 1
        if is_task_end(event):
            break
    sub.close()
    return session, count, time.process_time() - before


async def bench(
    repeat: int, rounds: int, backends: list[str], profile: Path | None
) -> dict[str, list[float]]:
    results: dict[str, list[float]] = {name: [] for name in backends}
    with tempfile.TemporaryDirectory() as tmp:
        redis_proc = None
        hubs: dict[str, Hub] = {}
        try:
            for name in backends:
                backend: Backend
                if name == "redis":
                    from omni_grpc.runtime.redis import redis_backend

                    redis_proc, url = start_redis(Path(tmp, "redis"))
                    backend = redis_backend(url)
                else:
                    backend = memory_backend()
                hubs[name] = Hub(DemoEngine(repeat=repeat), Path(tmp, name), backend=backend)
            sessions: dict[str, str | None] = {name: None for name in backends}
            for name, hub in hubs.items():  # warm up: the session, its trace, code paths
                sessions[name], _, _ = await one_task(hub, None)
            profiler = cProfile.Profile(time.thread_time) if profile is not None else None
            for _ in range(rounds):
                for name, hub in hubs.items():
                    if profiler is not None and name == "memory":
                        profiler.enable()
                    _, events, cpu = await one_task(hub, sessions[name])
                    if profiler is not None:
                        profiler.disable()
                    results[name].append(cpu / events * 1e6)
            if profiler is not None and profile is not None:
                profiler.dump_stats(profile)
            print(f"demo engine, repeat={repeat}: {events} events per task, best of {rounds}")
        finally:
            for hub in hubs.values():
                await hub.shutdown()
            if redis_proc is not None:
                redis_proc.terminate()
                redis_proc.wait()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--repeat", type=int, default=100, help="demo answer repetitions")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--backends", default="memory,redis")
    parser.add_argument("--profile", type=Path, help="cProfile the memory rounds to this file")
    args = parser.parse_args()
    backends = [b for b in args.backends.split(",") if b]
    if not backends or set(backends) - {"memory", "redis"}:
        parser.error("--backends takes memory and/or redis")
    results = asyncio.run(bench(args.repeat, args.rounds, backends, args.profile))
    for name, per_event in results.items():
        rounds = " ".join(f"{us:.1f}" for us in per_event)
        print(f"{name:>7}: {min(per_event):6.1f} us CPU per event (rounds: {rounds})")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
