"""The load test of the Redis backend (benchmarks/redis_load.py), bounded for CI.

One and three real replicas on a real redis-server, sessions held open and
new runs arriving, every run read to its end: no failure, no lost event, and
each replica's Redis connections within its pools' caps (the full load and
its figures are in BENCHMARKS.md).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from redis_server import require_redis

from omni_grpc.runtime.redis.connection import MAX_CONNECTIONS

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "redis_load.py"


def rows(stdout: str) -> list[dict[str, str]]:
    """The script's table, one dict per backend row, by column name."""
    lines = [line for line in stdout.splitlines() if line.startswith("|")]
    names = [cell.strip() for cell in lines[0].strip("|").split("|")]
    return [
        dict(zip(names, (cell.strip() for cell in line.strip("|").split("|")), strict=True))
        for line in lines[2:]
    ]


def load(*args: str) -> list[dict[str, str]]:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return rows(done.stdout)


def test_load_on_one_and_three_replicas_fails_nothing_and_stays_bounded() -> None:
    require_redis()
    # Every run goes ahead (no overload refusal: a loaded CI machine could
    # set it off; tests/test_operator_limits.py covers it, and the full size
    # in BENCHMARKS.md runs with it).
    found = load(
        "--replicas", "1,3", "--sessions", "30", "--rate", "10", "--seconds", "4",
        "--serve-args=--max-loop-busy 0",
    )  # fmt: skip
    assert [(r["backend"], r["replicas"]) for r in found] == [
        ("memory", "1"),
        ("redis", "1"),
        ("redis", "3"),
    ]
    for row in found:
        runs, events = int(row["runs"]), int(row["events"])
        assert runs >= 40 and events > 40 * runs, row
        assert (row["failed"], row["lost"], row["refused"]) == ("0", "0", "0"), row
        assert row["sessions left behind"] == "0", row
        if row["backend"] == "redis":
            replicas = int(row["replicas"])
            per_replica = int(row["connections per replica (peak)"])
            assert 0 < per_replica <= MAX_CONNECTIONS, row
            assert 0 < int(row["Redis connections (peak)"]) <= replicas * MAX_CONNECTIONS, row
            assert int(row["blocked (peak)"]) <= 2 * replicas, row


def test_runs_refused_under_load_are_told_and_leave_nothing_behind() -> None:
    """Past ``--max-runs`` a Run is refused with RESOURCE_EXHAUSTED before
    any event, and the sessions ListSessions shows afterwards are exactly
    those the runs that went ahead saw: a refusal made none."""
    require_redis()
    found = load(
        "--replicas", "1", "--no-memory", "--sessions", "20", "--rate", "10",
        "--seconds", "3", "--max-runs", "8", "--serve-args=--max-loop-busy 0",
    )  # fmt: skip
    [row] = found
    assert int(row["refused"]) > 0, row
    assert int(row["runs"]) > 0, row
    assert (row["failed"], row["lost"], row["sessions left behind"]) == ("0", "0", "0"), row
