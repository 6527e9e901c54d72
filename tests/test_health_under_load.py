"""Health follows Redis within its documented bound while the replica is
loaded, and does not flap once Redis is back (#30 item 3).

Real processes: a ``serve --redis-url`` replica, a redis-server killed with
SIGKILL and started again on its AOF, and the load (``run_load.py``) in a
process of its own, so the test's own client is not slowed by it. The test
watches health with ``grpc.health.v1.Health/Watch`` on its own connection and
times each change from the moment it caused it.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from redis_server import RedisServer

from omni_grpc.runtime.recovery import BACKEND_HEALTH_BOUND

WAIT = 120.0  # a safety net against hangs, never the thing a test checks
# What a loaded 2-core CI machine may add to the bound: the time for the
# replica's event loop to answer the watch, and for this process to read it.
SCHEDULING = 3.0
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
TESTS = Path(__file__).parent


@dataclass
class Replica:
    process: subprocess.Popen[str]
    grpc_address: str


def start_replica(redis_url: str, data: Path, log: IO[str]) -> Replica:
    """``serve`` with its log in a file: a replica's error log during an
    outage must not fill a pipe nobody reads."""
    process = subprocess.Popen(
        [
            sys.executable, "-m", "omni_grpc", "serve", "--grpc-port", "0", "--no-http",
            "--redis-url", redis_url, "--data-dir", str(data),
            "--pacing", "0.01", "--max-runs", "1000", "--max-loop-busy", "0",
        ],
        stdout=subprocess.PIPE, stderr=log, text=True,
    )  # fmt: skip
    assert process.stdout is not None
    address = ""
    for line in process.stdout:
        if "gRPC on grpc://" in line:
            address = line.split("grpc://", 1)[1].split()[0]
        if line.strip() == "omni-grpc ready":
            return Replica(process, address)
    raise AssertionError(f"serve exited ({process.wait()}) before it was ready")


@dataclass
class Load:
    """``run_load.py`` against one replica; ``ok``/``failed`` are its counts."""

    process: subprocess.Popen[str]
    ok: int = 0
    failed: int = 0
    lines: list[str] = field(default_factory=list)

    async def until_ok(self, count: int) -> None:
        """Until ``count`` runs more than now have ended well (read from its output)."""
        target = self.ok + count
        assert self.process.stdout is not None
        while self.ok < target:
            line = await asyncio.to_thread(self.process.stdout.readline)
            assert line, f"the load ended: {self.lines[-5:]}"
            self.lines.append(line)
            kind, number = line.split()
            setattr(self, kind, int(number))


@pytest.fixture
def replica(redis: RedisServer, tmp_path: Path) -> Iterator[Replica]:
    with (tmp_path / "serve.log").open("w") as log:
        started = start_replica(redis.url, tmp_path / "data", log)
        yield started
        started.process.terminate()
        try:
            started.process.wait(15)
        except subprocess.TimeoutExpired:
            started.process.kill()
            started.process.wait()


@pytest.fixture
def load(replica: Replica) -> Iterator[Load]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    process = subprocess.Popen(
        [sys.executable, str(TESTS / "run_load.py"), replica.grpc_address, "24"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
    )  # fmt: skip
    yield Load(process)
    process.terminate()
    process.wait(30)


class Watch:
    """Every health status the replica sends, with when it arrived."""

    def __init__(self) -> None:
        self.seen: list[tuple[float, int]] = []
        self.changed = asyncio.Event()

    async def follow(self, address: str) -> None:
        async with grpc.aio.insecure_channel(address) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            async for reply in stub.Watch(health_pb2.HealthCheckRequest(service="")):
                self.seen.append((time.monotonic(), reply.status))
                self.changed.set()

    async def until(self, status: int, after: float) -> float:
        """When the first ``status`` at or after ``after`` arrived."""
        while True:
            for when, seen in self.seen:
                if when >= after and seen == status:
                    return when
            self.changed.clear()
            await self.changed.wait()


@pytest.fixture
async def watch(replica: Replica) -> AsyncIterator[Watch]:
    watch = Watch()
    task = asyncio.create_task(watch.follow(replica.grpc_address))
    await asyncio.wait_for(watch.until(SERVING, 0.0), WAIT)
    yield watch
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


@pytest.mark.parametrize("fault", ["killed", "paused"])
async def test_health_turns_not_serving_within_its_bound_under_load_and_does_not_flap(
    fault: str, redis: RedisServer, replica: Replica, load: Load, watch: Watch
) -> None:
    """Killed: Redis refuses connections (SIGKILL, then started again on its
    AOF). Paused: Redis holds every connection and answers nothing (SIGSTOP,
    then SIGCONT), so only the probe's own timeout can tell."""
    # The replica is loaded: 24 runs at a time, and at least 72 ended well.
    await asyncio.wait_for(load.until_ok(72), WAIT)
    outages: list[float] = []
    for _outage in range(2):
        assert redis.process is not None
        killed = time.monotonic()
        if fault == "killed":
            redis.kill()
        else:
            os.kill(redis.process.pid, signal.SIGSTOP)
        down = await asyncio.wait_for(watch.until(NOT_SERVING, killed), WAIT)
        outages.append(down - killed)
        if fault == "killed":
            redis.start()  # the same port and AOF
        else:
            os.kill(redis.process.pid, signal.SIGCONT)
        up = await asyncio.wait_for(watch.until(SERVING, down), WAIT)
        # Loaded again after the outage: 72 more runs ended well, and health
        # said nothing else meanwhile.
        await asyncio.wait_for(load.until_ok(72), WAIT)
        after = [status for when, status in watch.seen if when > up]
        assert after == [], (after, watch.seen)
    assert max(outages) <= BACKEND_HEALTH_BOUND + SCHEDULING, outages
    print(f"NOT_SERVING after {', '.join(f'{s:.2f}' for s in outages)} s under load")
