"""The deployment guide's nginx in front of real replicas, for tests.

The site file is ``docs/deployment/nginx.conf`` as the guide shows it, with
only this machine's addresses, port and certificate paths put in; ``nginx -t``
must accept it before nginx starts. Shared by the nginx tests and the test
that follows the guide step by step.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from redis_server import free_port

CONFIG = Path(__file__).parent.parent / "docs" / "deployment" / "nginx.conf"
NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)


def require_nginx() -> str:
    if NGINX is None:
        message = "nginx is not installed (scripts/setup installs it)"
        if os.environ.get("OMNI_REQUIRE_TOOLCHAINS") or os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return NGINX


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_certs(d: Path) -> None:
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "1",
            "-subj", "/CN=omni-grpc nginx test CA", cwd=d)  # fmt: skip
    (d / "server.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    openssl("req", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=localhost",
            cwd=d)  # fmt: skip
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", "server.pem", "-days", "1", "-extfile", "server.ext",
            cwd=d)  # fmt: skip


def site_config(
    grpc_addresses: Sequence[str],
    http_addresses: Sequence[str],
    port: int,
    certs: Path,
    text: str | None = None,
) -> str:
    """The guide's file (or ``text``) with this machine's addresses, port and
    certificates. Each upstream's first ``server`` line is the pattern of all
    of them: its parameters (``max_fails=...``) are kept."""
    text = CONFIG.read_text() if text is None else text

    def upstream(name: str, addresses: Sequence[str]) -> None:
        nonlocal text
        block = re.search(rf"upstream {name} \{{.*?\n\}}", text, re.S)
        assert block is not None, name
        first = re.search(r"    server \S+?(( [^\n;]*)?);\n", block.group(0))
        assert first is not None, name
        servers = "".join(f"    server {a}{first.group(1)};\n" for a in addresses)
        body = re.sub(r"(    server [^\n]*\n)+", servers, block.group(0))
        text = text.replace(block.group(0), body)

    upstream("omni_grpc", grpc_addresses)
    upstream("omni_http", http_addresses)
    text, n = re.subn(r"listen 443 ", f"listen 127.0.0.1:{port} ", text)
    assert n == 1
    return text.replace("/etc/ssl/omni-grpc/", f"{certs}/")


def main_config(prefix: Path, site: Path) -> str:
    temp = "\n".join(
        f"    {kind}_temp_path {prefix}/{kind};"
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    return f"""worker_processes 1;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log;
events {{ worker_connections 256; }}
http {{
    log_format upstream '$request_uri|$status|$upstream_addr';
    access_log {prefix}/access.log upstream;
{temp}
    include {site};
}}
"""


@dataclass
class Nginx:
    """nginx serving ``site`` from its own prefix directory, on ``port``."""

    prefix: Path
    site: str
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        binary = require_nginx()
        self.prefix.mkdir(parents=True, exist_ok=True)
        site = self.prefix / "omni-grpc.conf"
        site.write_text(self.site)
        main = self.prefix / "nginx.conf"
        main.write_text(main_config(self.prefix, site))
        base = [
            binary,
            "-p",
            str(self.prefix),
            "-c",
            str(main),
            "-e",
            str(self.prefix / "startup.log"),
        ]
        checked = subprocess.run([*base, "-t"], capture_output=True, text=True)
        assert checked.returncode == 0, checked.stderr
        assert "syntax is ok" in checked.stderr and "test is successful" in checked.stderr
        self.process = subprocess.Popen([*base, "-g", "daemon off;"], stderr=subprocess.PIPE)
        for _ in range(500):  # until it accepts connections (a count, not a clock)
            assert self.process.poll() is None, self.error_log()
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.02)
        raise AssertionError(f"nginx never listened on {self.port}: {self.error_log()}")

    def error_log(self) -> str:
        path = self.prefix / "error.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def upstreams_used(self) -> list[str]:
        """``$upstream_addr`` of each logged request, in order (nginx writes
        the access log line as a request ends)."""
        path = self.prefix / "access.log"
        lines = path.read_text().splitlines() if path.exists() else []
        return [line.split("|")[2] for line in lines]

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(10)


def runs_in_progress(http_address: str) -> float:
    """The replica's ``omni_runs_in_progress`` gauge, read from its /metrics."""
    text = httpx.get(f"http://{http_address}/metrics", timeout=10).text
    for line in text.splitlines():
        if line.startswith("omni_runs_in_progress "):
            return float(line.split()[1])
    raise AssertionError(f"no omni_runs_in_progress on {http_address}")
