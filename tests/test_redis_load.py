"""The load test of the Redis backend (benchmarks/redis_load.py), bounded for CI.

One and three real replicas on a real redis-server, sessions held open and
new runs arriving, every run read to its end: no failure, no lost event, and
each replica's Redis connections within its pools' caps (the full load and
its figures are in BENCHMARKS.md).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from redis_server import require_redis

from omni_grpc.runtime.redis.connection import MAX_CONNECTIONS

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "redis_load.py"
ROW = re.compile(
    r"^\| (memory|redis) \| (\d+) \| (\d+) \| (\d+) \| (\d+) \| (\d+) \| (\S+) \| (\S+) \|", re.M
)


def test_load_on_one_and_three_replicas_fails_nothing_and_stays_bounded() -> None:
    require_redis()
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--replicas", "1,3", "--sessions", "30",
         "--rate", "10", "--seconds", "4"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    rows = ROW.findall(done.stdout)
    assert [(r[0], r[1]) for r in rows] == [("memory", "1"), ("redis", "1"), ("redis", "3")]
    per_replica = MAX_CONNECTIONS
    for backend, replicas, runs, events, failed, lost, conns, blocked in rows:
        assert int(runs) >= 40 and int(events) > 40 * int(runs), (backend, runs, events)
        assert (failed, lost) == ("0", "0")
        if backend == "redis":
            assert 0 < int(conns) <= int(replicas) * per_replica
            assert int(blocked) <= 2 * int(replicas)
