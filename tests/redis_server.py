"""A real ``redis-server`` for tests: started in a temp dir on a free port.

It runs with AOF (``appendfsync always``), so a test can kill it with SIGKILL
and start it again on the same files to check that nothing acknowledged was
lost. It is stopped by its PID. In CI a missing binary fails the tests that
need it, as the other toolchains do; elsewhere they are skipped.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

BINARY = shutil.which("redis-server")


def require_redis() -> str:
    if BINARY is None:
        message = "redis-server is not installed (scripts/setup installs it)"
        if os.environ.get("OMNI_REQUIRE_TOOLCHAINS") or os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return BINARY


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass
class RedisServer:
    directory: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    # More flags (``--cluster-enabled yes``: a Redis Cluster node).
    extra: tuple[str, ...] = ()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        binary = require_redis()
        self.directory.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            [
                binary,
                "--port", str(self.port),
                "--bind", "127.0.0.1",
                "--dir", str(self.directory),
                "--appendonly", "yes",
                "--appendfsync", "always",
                "--save", "",
                "--maxmemory-policy", "noeviction",
                "--protected-mode", "no",
                "--logfile", str(self.directory / "redis.log"),
                *self.extra,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        self._wait_ready()

    def _wait_ready(self) -> None:
        # Waits on the condition (a PING answered), bounded by a count of tries.
        for _ in range(500):
            assert self.process is not None
            if self.process.poll() is not None:
                log = (self.directory / "redis.log").read_text(errors="replace")
                raise RuntimeError(f"redis-server exited: {log[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as conn:
                    conn.sendall(b"PING\r\n")
                    if conn.recv(64).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            time.sleep(0.02)
        raise RuntimeError("redis-server did not answer PING")

    def kill(self) -> None:
        """SIGKILL, by PID: a crash, not a shutdown."""
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()
