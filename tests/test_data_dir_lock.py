"""One owner per data dir, with real ``omni-grpc serve`` processes.

A second server on a data dir a live one uses is refused before it touches
anything (its startup repair would otherwise close the live run as
"interrupted"), naming the data dir and the holder's pid. Replicas sharing
sessions through Redis share the data dir by design and still start side by
side; a server on its own is refused beside them, and they beside it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import ServeProcess
from redis_server import RedisServer
from waiting import wait_for

from omni_grpc.trace import read_jsonl

ServeFactory = Callable[..., ServeProcess]


def serve_once(data: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "omni_grpc", "serve", "--data-dir", str(data), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def omni(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "omni_grpc", *args],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def only_trace(data: Path) -> Path:
    [trace] = sorted(data.glob("traces/*/*.jsonl"))
    return trace


def last_kind(trace: Path) -> str | None:
    records = list(read_jsonl(trace, tolerant=True))
    return records[-1].message.WhichOneof("payload") if records else None


def ports(served: ServeProcess) -> list[str]:
    assert served.http_address is not None
    return [
        "--grpc-port", served.grpc_address.rsplit(":", 1)[1],
        "--http-port", served.http_address.rsplit(":", 1)[1],
    ]  # fmt: skip


@pytest.mark.parametrize("same_ports", [True, False], ids=["same-ports", "free-ports"])
def test_a_second_server_is_refused_and_leaves_the_live_trace_alone(
    serve_process: ServeFactory, tmp_path: Path, same_ports: bool
) -> None:
    data = tmp_path / "data"
    first = serve_process("--data-dir", str(data))
    target = ["--target", first.grpc_address]
    # A run waiting for its approval: its trace holds a run still open.
    detached = omni("run", "hold on", *target, "--approve", "ask", "--detach")
    assert detached.returncode == 0, detached.stderr
    session_id = detached.stdout.strip()
    trace = only_trace(data)
    wait_for(lambda: last_kind(trace) == "tool_call", "the run did not reach its approval")
    before = trace.read_bytes()

    where = ports(first) if same_ports else ["--grpc-port", "0", "--http-port", "0"]
    second = serve_once(data, *where)
    assert second.returncode == 1, second.stdout + second.stderr
    assert "ready" not in second.stdout
    assert str(data.resolve()) in second.stderr
    assert f"pid {first.process.pid}" in second.stderr
    assert "--data-dir" in second.stderr and "Traceback" not in second.stderr
    # Nothing was repaired or appended: the live run goes on, byte for byte.
    assert trace.read_bytes() == before

    approved = omni("approve", session_id, "call_demo_1", "allow", *target)
    assert approved.returncode == 0, approved.stderr
    wait_for(lambda: last_kind(trace) == "request_end", "the run did not finish")
    wait_for(lambda: "idle" in omni("sessions", *target).stdout.splitlines()[1], "still running")
    checked = omni("validate", str(trace))
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_data_dir_is_free_again_once_its_server_stops_or_dies(
    serve_process: ServeFactory, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    first = serve_process("--data-dir", str(data))
    first.process.send_signal(signal.SIGTERM)
    assert first.process.wait(30) == 0
    second = serve_process("--data-dir", str(data))
    # SIGKILL: the kernel drops the lock with the process; no stale lock remains.
    second.process.kill()
    second.process.wait(30)
    third = serve_process("--data-dir", str(data))
    assert third.process.poll() is None


def test_redis_replicas_share_a_data_dir_and_a_lone_server_is_refused_beside_them(
    serve_process: ServeFactory, redis: RedisServer, tmp_path: Path
) -> None:
    data = tmp_path / "shared"
    shared = ["--data-dir", str(data), "--redis-url", redis.url]
    one = serve_process(*shared)
    two = serve_process(*shared)
    assert one.process.poll() is None and two.process.poll() is None
    # A run on one replica, its history from the other: they share the data dir.
    done = omni("run", "hi", "--target", one.grpc_address, "--json")
    assert done.returncode == 0, done.stderr
    [row] = omni("sessions", "--target", two.grpc_address).stdout.splitlines()[1:]
    assert row.split()[1] == "idle"

    alone = serve_once(data, "--grpc-port", "0", "--http-port", "0")
    assert alone.returncode == 1, alone.stdout + alone.stderr
    assert "--redis-url" in alone.stderr and str(data.resolve()) in alone.stderr
    for pid in (one.process.pid, two.process.pid):
        assert str(pid) in alone.stderr, alone.stderr


def test_a_redis_replica_is_refused_beside_a_lone_server(
    serve_process: ServeFactory, redis: RedisServer, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    lone = serve_process("--data-dir", str(data))
    replica = serve_once(data, "--redis-url", redis.url, "--grpc-port", "0", "--http-port", "0")
    assert replica.returncode == 1, replica.stdout + replica.stderr
    assert f"pid {lone.process.pid}" in replica.stderr
    assert os.path.exists(data / "serve.lock")
