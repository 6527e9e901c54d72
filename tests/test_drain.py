"""Graceful drain with real ``omni-grpc serve`` processes.

On SIGTERM a server refuses new runs (UNAVAILABLE, HTTP 503, health
NOT_SERVING) and lets the running ones finish, approvals still answered and
streams still served, for ``--drain-timeout`` seconds; then it aborts what is
left and exits 0. A second SIGTERM or SIGINT stops it at once. Behind Redis,
another replica serves the draining one's sessions.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import grpc
import httpx
import pytest
from conftest import ServeProcess
from grpc_health.v1 import health_pb2, health_pb2_grpc
from redis_server import RedisServer
from waiting import wait_for

from omni_grpc.trace import read_jsonl

ServeFactory = Callable[..., ServeProcess]


def omni(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "omni_grpc", *args],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def records(data: Path, session_id: str) -> list[dict[str, object]]:
    from omni_grpc.convert import message_to_dict

    shards = sorted(data.glob(f"traces/*/{session_id}_*.jsonl"))
    return (
        [message_to_dict(r.message) for r in read_jsonl(shards[-1], tolerant=True)]
        if shards
        else []
    )


def kinds(data: Path, session_id: str) -> list[str]:
    return [str(r["payload"].get("type", r["type"])) for r in records(data, session_id)]  # type: ignore[attr-defined]


def pending_run(served: ServeProcess, data: Path) -> str:
    """A detached run waiting for its approval."""
    detached = omni(
        "run", "hold on", "--target", served.grpc_address, "--approve", "ask", "--detach"
    )
    assert detached.returncode == 0, detached.stderr
    session_id = detached.stdout.strip()
    wait_for(lambda: kinds(data, session_id)[-1:] == ["tool_call"], "the run did not ask")
    return session_id


def signal_and_wait_for_drain(served: ServeProcess, sig: signal.Signals = signal.SIGTERM) -> str:
    served.process.send_signal(sig)
    assert served.process.stdout is not None
    for line in served.process.stdout:
        if line.startswith("omni-grpc draining"):
            return line
    raise AssertionError(f"no draining line; exit {served.process.wait()}")


def health(address: str) -> int:
    with grpc.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        return int(stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=10).status)


def test_sigterm_drains_the_running_task_then_exits_0(
    serve_process: ServeFactory, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    served = serve_process("--data-dir", str(data))
    session_id = pending_run(served, data)
    line = signal_and_wait_for_drain(served)
    assert "1 running" in line and "30 s" in line

    # New work is refused, everywhere, with the status load balancers read.
    refused = omni("run", "new", "--target", served.grpc_address)
    assert refused.returncode == 3 and "UNAVAILABLE" in refused.stderr, refused.stderr
    assert health(served.grpc_address) == health_pb2.HealthCheckResponse.NOT_SERVING
    assert served.http_address is not None
    base = f"http://{served.http_address}"
    healthz = httpx.get(f"{base}/healthz")
    assert healthz.status_code == 503 and "draining" in healthz.json()["problems"]
    assert httpx.post(f"{base}/v1/runs", json={"prompt": "new"}).status_code == 503
    assert httpx.post(f"{base}/api/sessions", json={}).status_code == 503

    # The running task is still served: its history, and its approval.
    assert omni("history", session_id, "--target", served.grpc_address).returncode == 0
    approved = omni("approve", session_id, "call_demo_1", "allow", "--target", served.grpc_address)
    assert approved.returncode == 0, approved.stderr
    # It finishes, and the server exits 0 on its own: nothing was aborted.
    assert served.process.wait(60) == 0
    done = kinds(data, session_id)
    assert "abort" not in done and done[-1] == "request_end"
    assert records(data, session_id)[-1]["payload"]["status"] == "completed"  # type: ignore[index]


def test_what_is_left_after_the_drain_timeout_is_aborted_and_the_exit_is_0(
    serve_process: ServeFactory, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    served = serve_process("--data-dir", str(data), "--drain-timeout", "0.5")
    session_id = pending_run(served, data)
    signal_and_wait_for_drain(served)
    assert served.process.wait(60) == 0
    assert served.process.stdout is not None
    said = served.process.stdout.read()
    assert "stopping 1 unfinished run(s) after the drain timeout" in said
    last = records(data, session_id)
    assert last[-1]["payload"] == {"type": "abort", "reason": "server shutting down"}
    outputs = [r["payload"] for r in last if r["payload"].get("type") == "tool_call_output"]  # type: ignore[attr-defined]
    assert [o["output"] for o in outputs] == ["Tool call not run: server shutting down."]  # type: ignore[index]


@pytest.mark.parametrize("second", [signal.SIGTERM, signal.SIGINT])
def test_a_second_signal_stops_at_once(
    serve_process: ServeFactory, tmp_path: Path, second: signal.Signals
) -> None:
    data = tmp_path / "data"
    served = serve_process("--data-dir", str(data), "--drain-timeout", "3600")
    session_id = pending_run(served, data)
    signal_and_wait_for_drain(served)
    served.process.send_signal(second)
    # Far inside the drain timeout: the second signal ended the wait.
    assert served.process.wait(60) == 0
    assert served.process.stdout is not None
    assert "after a second signal" in served.process.stdout.read()
    assert kinds(data, session_id)[-1] == "abort"


def test_behind_redis_another_replica_serves_the_draining_ones_sessions(
    serve_process: ServeFactory, redis: RedisServer, tmp_path: Path
) -> None:
    data = tmp_path / "shared"
    shared = ["--data-dir", str(data), "--redis-url", redis.url]
    draining, other = serve_process(*shared), serve_process(*shared)
    session_id = pending_run(draining, data)
    signal_and_wait_for_drain(draining)
    refused = omni("run", "new", "--target", draining.grpc_address)
    assert refused.returncode == 3 and "UNAVAILABLE" in refused.stderr

    # The other replica shows the run, answers its approval, and the
    # draining replica finishes it before it exits.
    target = ["--target", other.grpc_address]
    [row] = omni("sessions", *target).stdout.splitlines()[1:]
    assert row.split()[:2] == [session_id, "running"]
    approved = omni("approve", session_id, "call_demo_1", "allow", *target)
    assert approved.returncode == 0, approved.stderr
    assert draining.process.wait(60) == 0
    assert "abort" not in kinds(data, session_id)
    # The session goes on on the replica still serving.
    again = omni("run", "and now?", "--session", session_id, *target, "--json")
    assert again.returncode == 0, again.stderr
    assert kinds(data, session_id)[-1] == "request_end"
