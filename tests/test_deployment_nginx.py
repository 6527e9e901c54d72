"""The deployment guide's nginx config, checked and then used for real.

``nginx -t`` must accept ``docs/deployment/nginx.conf`` as written (only the
addresses, the port and the certificate paths are replaced), and nginx
running it must carry gRPC streams over TLS and HTTP/2 to two replicas on one
Redis, and SSE without buffering: the first frame of a run arrives while the
run is still going.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import socket
import ssl
import struct
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import httpx
import pytest
from conftest import ServeProcess
from grpc_health.v1 import health_pb2, health_pb2_grpc
from redis_server import RedisServer, free_port

from omni_grpc.client import AgentClient
from omni_grpc_proto.omni.v1 import agent_service_pb2 as pb

CONFIG = Path(__file__).parent.parent / "docs" / "deployment" / "nginx.conf"
NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
WAIT = 60.0


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
    grpc_addresses: list[str], http_addresses: list[str], port: int, certs: Path
) -> str:
    """The guide's file with this machine's addresses, port and certificates."""
    text = CONFIG.read_text()

    def upstream(name: str, addresses: list[str]) -> None:
        nonlocal text
        block = re.search(rf"upstream {name} \{{.*?\n\}}", text, re.S)
        assert block is not None, name
        servers = "".join(f"    server {a};\n" for a in addresses)
        body = re.sub(r"(    server [^\n]*\n)+", servers, block.group(0))
        text = text.replace(block.group(0), body)

    upstream("omni_grpc", grpc_addresses)
    upstream("omni_http", http_addresses)
    text, n = re.subn(r"listen 443 ", f"listen 127.0.0.1:{port} ", text)
    assert n == 1
    text = text.replace("/etc/ssl/omni-grpc/", f"{certs}/")
    return text


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
    access_log off;
{temp}
    include {site};
}}
"""


@pytest.fixture
def nginx_front(
    serve_process: Callable[..., ServeProcess], tmp_path: Path
) -> Iterator[tuple[int, Path, list[ServeProcess]]]:
    binary = require_nginx()
    redis = RedisServer(tmp_path / "redis")
    redis.start()
    replicas = [
        serve_process(
            "--redis-url", redis.url, "--data-dir", str(tmp_path / "data"), "--pacing", "0.02"
        )
        for _ in range(2)
    ]
    certs = tmp_path / "certs"
    certs.mkdir()
    make_certs(certs)
    prefix = tmp_path / "nginx"
    prefix.mkdir()
    port = free_port()
    site = prefix / "omni-grpc.conf"
    site.write_text(
        site_config(
            [r.grpc_address for r in replicas],
            [r.http_address or "" for r in replicas],
            port,
            certs,
        )
    )
    main = prefix / "nginx.conf"
    main.write_text(main_config(prefix, site))
    base = [binary, "-p", str(prefix), "-c", str(main), "-e", str(prefix / "startup.log")]
    checked = subprocess.run([*base, "-t"], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr
    assert "syntax is ok" in checked.stderr and "test is successful" in checked.stderr
    proc = subprocess.Popen([*base, "-g", "daemon off;"], stderr=subprocess.PIPE)
    try:
        for _ in range(500):  # until it accepts connections (a count, not a clock)
            assert proc.poll() is None, (prefix / "error.log").read_text()
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.02)
        yield port, certs, replicas
    finally:
        proc.terminate()
        proc.wait(10)
        redis.stop()


async def test_the_guides_nginx_config_serves_grpc_and_unbuffered_sse(
    nginx_front: tuple[int, Path, list[ServeProcess]],
) -> None:
    port, certs, _replicas = nginx_front
    target = f"localhost:{port}"
    ca = (certs / "ca.pem").read_bytes()
    # Health through the proxy.
    channel = grpc.aio.secure_channel(target, grpc.ssl_channel_credentials(ca))
    reply = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
    assert reply.status == health_pb2.HealthCheckResponse.SERVING
    await channel.close()
    async with AgentClient(target, tls_ca=ca) as client:
        # A gRPC stream through nginx: every event, in order, to the end.
        kinds = [e.kind async for e in client.run("through the proxy")]
        assert kinds[-1] == "@task_state" and "partial_text" in kinds
        # SSE through nginx: the first frame arrives while the run still runs.
        context = ssl.create_default_context(cadata=ca.decode())
        http = httpx.AsyncClient(base_url=f"https://{target}", verify=context)
        async with http, http.stream("POST", "/v1/runs", json={"prompt": "stream it"}) as r:
            assert r.status_code == 200
            assert r.headers["content-type"].startswith("text/event-stream")
            session_id = r.headers["omni-session-id"]
            lines = r.aiter_lines()
            first = await asyncio.wait_for(anext(lines), WAIT)
            assert first.startswith("event: ")
            sessions = {s.session_id: s for s in await client.list_sessions()}
            # Still running: nginx passed the frame on, it did not hold it.
            assert sessions[session_id].state == pb.SESSION_STATE_RUNNING
            rest = [line async for line in lines]
        assert "event: done" in rest
        # Connect and gRPC-Web on the gRPC path, over HTTP/1.1: nginx sends
        # them to the HTTP port, and a stream's first message arrives while the
        # run still runs.
        http = httpx.AsyncClient(base_url=f"https://{target}", verify=context)
        body = json.dumps({"prompt": "over http/1.1"}).encode()
        envelope = struct.pack(">BI", 0, len(body)) + body
        for content_type in ("application/connect+json", "application/grpc-web+json"):
            async with http.stream(
                "POST", "/omni.v1.AgentService/Run", content=envelope,
                headers={"content-type": content_type},
            ) as r:  # fmt: skip
                assert r.status_code == 200 and r.http_version == "HTTP/1.1"
                assert r.headers["content-type"] == content_type
                session_id = r.headers["omni-session-id"]
                chunks = r.aiter_bytes()
                first = await asyncio.wait_for(anext(chunks), WAIT)
                assert first[0] == 0 and b'"sessionId"' in first
                sessions = {s.session_id: s for s in await client.list_sessions()}
                assert sessions[session_id].state == pb.SESSION_STATE_RUNNING
                rest = b"".join([chunk async for chunk in chunks])
            assert b"SESSION_STATE_IDLE" in rest
        await http.aclose()


def test_the_guide_shows_the_checked_config_unchanged() -> None:
    guide = (CONFIG.parent.parent / "deployment.md").read_text()
    block = re.search(r"```nginx\n(.*?)```", guide, re.S)
    assert block is not None
    assert block.group(1) == CONFIG.read_text()
