"""A ``--redis-url`` that names a Redis Cluster node or a Sentinel, with real ones.

The backend needs one Redis primary (its global keys span hash slots, and a
Sentinel stores nothing). Such a URL used to be taken for a Redis: health
said SERVING while every run failed INTERNAL on ``MOVED``, or the server
exited with a traceback. Now ``serve`` refuses it at startup with a usage
error (exit 2) naming what the URL is, and a Redis that turns into one while
a replica runs makes health NOT_SERVING with the same words.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import httpx
import pytest
from conftest import ServeProcess
from grpc_health.v1 import health_pb2, health_pb2_grpc
from redis_server import RedisServer, free_port, require_redis
from waiting import wait_for

ServeFactory = Callable[..., ServeProcess]
EXIT_USAGE = 2
# docs/deployment.md: NOT_SERVING at most 2 s after Redis stops serving; a
# loaded machine gets 3 s more to deliver the answer (as test_health_under_load).
HEALTH_BOUND = 2.0 + 3.0


def cluster_node(directory: Path, port: int | None = None) -> RedisServer:
    """A one-node Redis Cluster holding every slot (its state is ``ok``)."""
    node = RedisServer(
        directory,
        **({"port": port} if port else {}),
        extra=(
            "--cluster-enabled", "yes",
            "--cluster-config-file", str(directory / "nodes.conf"),
            # A bus port of its own: the default, port + 10000, is past 65535
            # for an ephemeral port above 55535, and Redis then exits.
            "--cluster-port", str(free_port()),
        ),
    )  # fmt: skip
    node.start()
    with socket.create_connection(("127.0.0.1", node.port), timeout=5) as conn:
        conn.sendall(b"CLUSTER ADDSLOTSRANGE 0 16383\r\n")
        assert conn.recv(64).startswith(b"+OK")
    return node


@pytest.fixture
def sentinel(redis: RedisServer, tmp_path: Path) -> Iterator[str]:
    """A real Sentinel (``redis-server --sentinel``) monitoring ``redis``; its URL."""
    binary = require_redis()
    port = free_port()
    config = tmp_path / "sentinel.conf"
    config.write_text(
        f"port {port}\nbind 127.0.0.1\nprotected-mode no\ndir {tmp_path}\n"
        f"sentinel monitor primary 127.0.0.1 {redis.port} 1\n",
        encoding="utf-8",
    )
    process = subprocess.Popen(
        [binary, str(config), "--sentinel"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        wait_for(lambda: _answers(port, b"SENTINEL MASTERS\r\n"), "the Sentinel did not answer")
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        process.terminate()
        process.wait(10)


def _answers(port: int, command: bytes) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as conn:
            conn.sendall(command)
            return conn.recv(16).startswith(b"*")
    except OSError:
        return False


def serve_refused(url: str, data: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "omni_grpc", "serve", "--grpc-port", "0", "--http-port", "0",
         "--data-dir", str(data), "--redis-url", url],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def test_a_cluster_node_is_refused_at_startup(tmp_path: Path) -> None:
    node = cluster_node(tmp_path / "cluster")
    try:
        done = serve_refused(f"redis://127.0.0.1:{node.port}/0", tmp_path / "data")
    finally:
        node.stop()
    assert done.returncode == EXIT_USAGE, done.stderr
    assert (
        f"omni-grpc serve: error: argument --redis-url: redis://127.0.0.1:{node.port}/0 "
        "is a Redis Cluster node"
    ) in done.stderr
    assert "Traceback" not in done.stderr
    assert "omni-grpc ready" not in done.stdout


def test_a_sentinel_is_refused_at_startup(sentinel: str, tmp_path: Path) -> None:
    done = serve_refused(sentinel, tmp_path / "data")
    assert done.returncode == EXIT_USAGE, done.stderr
    assert f"argument --redis-url: {sentinel} is a Redis Sentinel, which stores no data" in (
        done.stderr
    )
    assert "Traceback" not in done.stderr


def test_a_password_in_the_url_stays_out_of_the_refusal(tmp_path: Path) -> None:
    node = cluster_node(tmp_path / "cluster")
    try:
        done = serve_refused(f"redis://:hunter2@127.0.0.1:{node.port}/0", tmp_path / "data")
    finally:
        node.stop()
    assert done.returncode == EXIT_USAGE, done.stderr
    assert "is a Redis Cluster node" in done.stderr and "hunter2" not in done.stderr


def test_a_redis_that_turns_into_a_cluster_node_makes_health_not_serving(
    serve_process: ServeFactory, redis: RedisServer, tmp_path: Path
) -> None:
    served = serve_process("--redis-url", redis.url)
    assert served.http_address is not None
    healthz = f"http://{served.http_address}/healthz"
    assert httpx.get(healthz).status_code == 200
    redis.stop()
    node = cluster_node(tmp_path / "cluster", port=redis.port)  # the same address
    try:
        start = time.monotonic()
        wait_for(
            lambda: (
                "Redis Cluster node"
                in httpx.get(healthz).json().get("problems", {}).get("backend", "")
            ),
            "health did not name the cluster node",
        )
        assert time.monotonic() - start <= HEALTH_BOUND
        with grpc.insecure_channel(served.grpc_address) as channel:
            status = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=""), timeout=10
            )
        assert status.status == health_pb2.HealthCheckResponse.NOT_SERVING
        # A run is refused as the outage it is, not as a bug of the server's.
        run = subprocess.run(
            [sys.executable, "-m", "omni_grpc", "run", "hi", "--target", served.grpc_address],
            capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        assert "UNAVAILABLE" in run.stderr and "INTERNAL" not in run.stderr, run.stderr
    finally:
        node.stop()
        served.process.terminate()
        served.process.wait(30)
    assert served.process.stderr is not None
    assert "Traceback" not in served.process.stderr.read()
