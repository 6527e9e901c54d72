"""Stream rate on Redis against the memory backend, with 1 and several clients.

Each round runs ``clients`` concurrent ``Run`` calls of the demo engine at
zero pacing on a replica with the memory log, then on one with
``--redis-url`` (rounds alternate); the rate is the events all clients
received over the round's wall time, and the figure is the median per-round
redis/memory ratio, with its quartiles (on a shared machine a round's ratio
moves with the load). Beside it, the Redis commands the replica sent per
delivered event, from redis-server's ``INFO commandstats`` around the Redis
rounds (by command), and both servers' CPU per event.

    .venv/bin/python benchmarks/redis_stream_rate.py [--clients 1,8] [--rounds 5] [--pacing 0]
        [--baseline-src OTHER_TREE/src]

With ``--pacing`` the engine waits between deltas, so a run's events reach
the log a few at a time (each batch small) instead of in bursts. With
``--baseline-src`` a third replica on the same redis-server runs another
tree's code (``PYTHONPATH``, such as a worktree of the commit before a change),
in the same rounds, and gets a row of its own ("before"), so before and after
are measured side by side; the commands and redis-server CPU then count both.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path

import grpc
import redis.asyncio as aioredis
from _common import cpu_seconds  # benchmarks/_common.py, beside this file
from scale_out import Proc, start_redis, start_serve  # benchmarks/scale_out.py

from omni_grpc_proto.omni.v1 import agent_service_pb2 as pb
from omni_grpc_proto.omni.v1 import agent_service_pb2_grpc


async def round_rate(server: Proc, clients: int) -> tuple[int, float]:
    """(events received by all clients, seconds)."""
    async with grpc.aio.insecure_channel(server.address) as channel:
        stub = agent_service_pb2_grpc.AgentServiceStub(channel)

        async def one() -> int:
            return sum([1 async for _ in stub.Run(pb.RunRequest(prompt="bench"))])

        start = time.perf_counter()
        counts = await asyncio.gather(*(one() for _ in range(clients)))
        return sum(counts), time.perf_counter() - start


async def commandstats(url: str) -> dict[str, int]:
    admin = aioredis.Redis.from_url(url)
    try:
        stats = await admin.info("commandstats")
    finally:
        await admin.aclose()
    return {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clients", default="1,8")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=20, help="demo answer repeats per run")
    parser.add_argument(
        "--pacing", type=float, default=0.0, help="demo engine: seconds between deltas"
    )
    parser.add_argument("--baseline-src", help="another tree's src/ for a 'before' replica")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "redis").mkdir()
        redis_proc, url = start_redis(root / "redis")
        repeat = ("--engine-opt", f"repeat={args.repeat}", "--engine-opt", f"pacing={args.pacing}")
        memory = start_serve(root / "memory", *repeat)
        shared = start_serve(root / "shared", "--redis-url", url, *repeat)
        before = None
        if args.baseline_src:
            os.environ["PYTHONPATH"] = args.baseline_src
            try:
                before = start_serve(root / "before", "--redis-url", url, *repeat)
            finally:
                del os.environ["PYTHONPATH"]
        try:
            await round_rate(memory, 1)  # warm each
            await round_rate(shared, 1)
            if before is not None:
                await round_rate(before, 1)
            print("| clients | memory events/s | Redis events/s "
                  "| Redis / memory (median per round, quartiles) | Redis commands per event "
                  "| server CPU us/event memory / Redis "
                  "| redis-server CPU us/event |")  # fmt: skip
            print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
            for clients in (int(c) for c in args.clients.split(",")):
                ratios, mem_rates, red_rates, before_ratios = [], [], [], []
                used: dict[str, int] = {}
                red_events = mem_events = 0
                mem_cpu = red_cpu = redis_cpu = 0.0
                for round_no in range(args.rounds):
                    c0 = cpu_seconds(memory.process.pid)
                    n, s = await round_rate(memory, clients)
                    mem_cpu += cpu_seconds(memory.process.pid) - c0
                    mem_events += n
                    mem_rates.append(n / s)
                    # The baseline goes first every other round (load drifts).
                    if before is not None and round_no % 2:
                        n, s = await round_rate(before, clients)
                        before_ratios.append(n / s / mem_rates[-1])
                    cmds_before = await commandstats(url)
                    c0, r0 = cpu_seconds(shared.process.pid), cpu_seconds(redis_proc.pid)
                    n, s = await round_rate(shared, clients)
                    red_cpu += cpu_seconds(shared.process.pid) - c0
                    redis_cpu += cpu_seconds(redis_proc.pid) - r0
                    cmds_after = await commandstats(url)
                    for k, calls in cmds_after.items():
                        if k != "info" and calls - cmds_before.get(k, 0) > 0:
                            used[k] = used.get(k, 0) + calls - cmds_before.get(k, 0)
                    red_events += n
                    red_rates.append(n / s)
                    ratios.append(red_rates[-1] / mem_rates[-1])
                    if before is not None and not round_no % 2:
                        n, s = await round_rate(before, clients)
                        before_ratios.append(n / s / mem_rates[-1])
                per_event = sum(used.values()) / red_events
                top = ", ".join(
                    f"{k} {v / red_events:.2f}"
                    for k, v in sorted(used.items(), key=lambda kv: -kv[1])[:4]
                )
                ratio = statistics.median(ratios)
                quartiles = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else [ratio] * 3
                if before_ratios:
                    b_q = statistics.quantiles(before_ratios, n=4)
                    print(f"| {clients} (before) | | | {statistics.median(before_ratios):.2f} "
                          f"({b_q[0]:.2f}-{b_q[2]:.2f}) | | | |")  # fmt: skip
                print(f"| {clients} | {statistics.median(mem_rates):,.0f} "
                      f"| {statistics.median(red_rates):,.0f} "
                      f"| **{ratio:.2f}** ({quartiles[0]:.2f}-{quartiles[2]:.2f}) "
                      f"| {per_event:.2f} ({top}) "
                      f"| {mem_cpu / mem_events * 1e6:.0f} / {red_cpu / red_events * 1e6:.0f} "
                      f"| {redis_cpu / red_events * 1e6:.0f} |")  # fmt: skip
        finally:
            memory.stop()
            shared.stop()
            if before is not None:
                before.stop()
            redis_proc.terminate()
            redis_proc.wait(10)


if __name__ == "__main__":
    asyncio.run(main())
