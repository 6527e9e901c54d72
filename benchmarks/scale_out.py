"""The Redis backend against the memory one, in one run, on this machine.

* stream rate: ``Run`` of the demo engine at zero pacing on a replica with the
  memory log, then on one with ``--redis-url``; rounds alternate, medians,
  the redis/memory ratio (events/s).
* server CPU per delivered event, with 1, 10 and 100 subscribers attached to
  the session (gRPC ``Attach``) while one run streams: the serving process's
  CPU time over (events x subscribers). With Redis the figure adds the
  replica's share only; redis-server's own CPU is reported beside it.
* owner loss: two replicas on one Redis; a paced run on A, a client attached
  on B; SIGKILL A; the time until B's client sees the run closed
  (``task_state idle``), for ``--owner-loss-timeout`` at its default.

Every server is a real subprocess (``omni-grpc serve``, ``redis-server`` with
AOF and ``appendfsync always``, as the deployment guide sets it).

    .venv/bin/python benchmarks/scale_out.py [--rounds 5] [--repeat 40]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc
from _common import cpu_seconds, free_port  # benchmarks/_common.py, beside this file

from omni_grpc_proto.omni.v1 import agent_service_pb2 as pb
from omni_grpc_proto.omni.v1 import agent_service_pb2_grpc


@dataclass
class Proc:
    process: subprocess.Popen[str]
    address: str

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()


def start_redis(directory: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(directory),
         "--appendonly", "yes", "--appendfsync", "always", "--save", "",
         "--maxmemory-policy", "noeviction", "--logfile", str(directory / "redis.log")],
    )  # fmt: skip
    for _ in range(500):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as conn:
                conn.sendall(b"PING\r\n")
                if conn.recv(16).startswith(b"+PONG"):
                    return proc, f"redis://127.0.0.1:{port}/0"
        except OSError:
            time.sleep(0.02)
    raise RuntimeError("redis-server did not start")


def start_serve(data_dir: Path, *extra: str, launcher: Sequence[str] = ()) -> Proc:
    """``launcher``: what runs ``-m omni_grpc`` instead of this Python (a profiler)."""
    cmd = [*(launcher or [sys.executable]), "-m", "omni_grpc", "serve", "--grpc-port", "0",
           "--no-http", "--data-dir", str(data_dir), "--no-metrics", *extra]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    address = None
    for line in proc.stdout:
        match = re.search(r"gRPC on grpc://(\S+)", line)
        if match:
            address = match.group(1)
        if line.strip() == "omni-grpc ready":
            assert address is not None
            return Proc(proc, address)
    raise RuntimeError(f"serve exited: {proc.wait()}")


async def one_run(address: str, session_id: str = "") -> tuple[int, float, str]:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = agent_service_pb2_grpc.AgentServiceStub(channel)
        start = time.perf_counter()
        events = 0
        sid = session_id
        async for response in stub.Run(pb.RunRequest(prompt="bench", session_id=session_id)):
            events += 1
            sid = response.session_id
        return events, time.perf_counter() - start, sid


async def stream_rate(memory: Proc, redis: Proc, rounds: int) -> dict[str, list[float]]:
    rates: dict[str, list[float]] = {"memory": [], "redis": []}
    for _ in range(rounds):
        for name, server in (("memory", memory), ("redis", redis)):
            events, seconds, _ = await one_run(server.address)
            rates[name].append(events / seconds)
    return rates


async def cpu_per_event(server: Proc, subscribers: int) -> float:
    """Server CPU microseconds per delivered event, ``subscribers`` watching."""
    _, _, session_id = await one_run(server.address)  # a session to watch
    channel = grpc.aio.insecure_channel(server.address)
    stub = agent_service_pb2_grpc.AgentServiceStub(channel)
    calls = [stub.Attach(pb.AttachRequest(session_id=session_id)) for _ in range(subscribers)]
    # Each watcher is attached once it has its unicast task_state.
    iterators = [call.__aiter__() for call in calls]
    await asyncio.gather(*(anext(it) for it in iterators))
    counts = [0] * subscribers

    async def watch(i: int) -> None:
        async for response in iterators[i]:
            counts[i] += 1
            if (
                response.WhichOneof("kind") == "event"
                and response.event.WhichOneof("kind") == "task_state"
                and response.event.task_state.state == pb.SESSION_STATE_IDLE
            ):
                return

    before = cpu_seconds(server.process.pid)
    watchers = [asyncio.create_task(watch(i)) for i in range(subscribers)]
    run_events, _, _ = await one_run(server.address, session_id)
    await asyncio.gather(*watchers)
    used = cpu_seconds(server.process.pid) - before
    for call in calls:
        call.cancel()
    await channel.close()
    delivered = sum(counts) + run_events
    return used / delivered * 1e6


async def owner_loss(redis_url: str, data_dir: Path) -> float:
    a = start_serve(data_dir, "--redis-url", redis_url, "--pacing", "0.05",
                    "--engine-opt", "repeat=50")  # fmt: skip
    b = start_serve(data_dir, "--redis-url", redis_url)
    try:
        async with (
            grpc.aio.insecure_channel(a.address) as ca,
            grpc.aio.insecure_channel(b.address) as cb,
        ):
            run = agent_service_pb2_grpc.AgentServiceStub(ca).Run(pb.RunRequest(prompt="long"))
            first = await anext(run.__aiter__())
            attach = agent_service_pb2_grpc.AgentServiceStub(cb).Attach(
                pb.AttachRequest(session_id=first.session_id, after_event_id=first.event_id)
            )
            it = attach.__aiter__()
            await anext(it)
            killed = time.perf_counter()
            os.kill(a.process.pid, signal.SIGKILL)
            async for response in it:
                if (
                    response.WhichOneof("kind") == "event"
                    and response.event.WhichOneof("kind") == "task_state"
                    and response.event.task_state.state == pb.SESSION_STATE_IDLE
                ):
                    return time.perf_counter() - killed
            raise RuntimeError("the attach ended before the run was closed")
    finally:
        a.stop()
        b.stop()


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=40, help="demo answer repeats per run")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "redis").mkdir()
        redis_proc, url = start_redis(root / "redis")
        repeat = ("--engine-opt", f"repeat={args.repeat}")
        memory = start_serve(root / "memory", *repeat)
        shared = start_serve(root / "shared", "--redis-url", url, *repeat)
        try:
            rates = await stream_rate(memory, shared, args.rounds)
            mem, red = statistics.median(rates["memory"]), statistics.median(rates["redis"])
            ratios = [r / m for r, m in zip(rates["redis"], rates["memory"], strict=True)]
            per_round = statistics.median(ratios)
            print(f"stream rate: memory {mem:,.0f} events/s, redis {red:,.0f} events/s, "
                  f"redis/memory {red / mem:.2f} (median per-round {per_round:.2f})")  # fmt: skip
            for n in (1, 10, 100):
                redis_before = cpu_seconds(redis_proc.pid)
                m = await cpu_per_event(memory, n)
                r0 = cpu_seconds(redis_proc.pid)
                r = await cpu_per_event(shared, n)
                redis_used = cpu_seconds(redis_proc.pid) - r0
                print(f"{n:>3} subscribers: server CPU per delivered event: memory {m:.1f} us, "
                      f"redis {r:.1f} us (redis-server itself: {redis_used:.2f} s CPU for that "
                      f"run; {r0 - redis_before:.2f} s during the memory one)")  # fmt: skip
        finally:
            memory.stop()
            shared.stop()
        closes = [await owner_loss(url, root / "loss") for _ in range(3)]
        print(f"owner kill -> run closed (default --owner-loss-timeout 12): "
              f"{', '.join(f'{c:.2f} s' for c in closes)}")  # fmt: skip
        redis_proc.terminate()
        redis_proc.wait(10)


if __name__ == "__main__":
    asyncio.run(main())
