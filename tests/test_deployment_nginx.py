"""The deployment guide's nginx config, checked and then used for real.

``nginx -t`` must accept ``docs/deployment/nginx.conf`` as written (only the
addresses, the port and the certificate paths are replaced), and nginx
running it must carry gRPC streams over TLS and HTTP/2 to three replicas on
one Redis, and SSE without buffering: the first frame of a run arrives while
the run is still going. Its passive health checks take a killed replica out:
the request that finds it dead goes on to another replica, and no later one
is sent to it.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import ssl
import struct
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import httpx
import pytest
from conftest import ServeProcess
from grpc_health.v1 import health_pb2, health_pb2_grpc
from nginx_front import CONFIG, Nginx, make_certs, require_nginx, site_config
from redis_server import RedisServer, free_port

from omni_grpc.client import AgentClient
from omni_grpc_proto.omni.v1 import agent_service_pb2 as pb

WAIT = 60.0


@pytest.fixture
def nginx_front(
    nginx_site: tuple[Nginx, Path, list[ServeProcess]],
) -> tuple[int, Path, list[ServeProcess]]:
    nginx, certs, replicas = nginx_site
    return nginx.port, certs, replicas


@pytest.fixture
def nginx_site(
    serve_process: Callable[..., ServeProcess], tmp_path: Path
) -> Iterator[tuple[Nginx, Path, list[ServeProcess]]]:
    require_nginx()
    redis = RedisServer(tmp_path / "redis")
    redis.start()
    replicas = [
        serve_process(
            "--redis-url", redis.url, "--data-dir", str(tmp_path / "data"), "--pacing", "0.02"
        )
        for _ in range(3)
    ]
    certs = tmp_path / "certs"
    certs.mkdir()
    make_certs(certs)
    port = free_port()
    site = site_config(
        [r.grpc_address for r in replicas], [r.http_address or "" for r in replicas], port, certs
    )
    nginx = Nginx(tmp_path / "nginx", site, port)
    try:
        nginx.start()
        yield nginx, certs, replicas
    finally:
        nginx.stop()
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


async def test_a_killed_replica_is_taken_out_of_rotation(
    nginx_site: tuple[Nginx, Path, list[ServeProcess]],
) -> None:
    nginx, certs, replicas = nginx_site
    target = f"localhost:{nginx.port}"
    ca = (certs / "ca.pem").read_bytes()
    context = ssl.create_default_context(cadata=ca.decode())
    http = httpx.AsyncClient(base_url=f"https://{target}", verify=context)
    async with AgentClient(target, tls_ca=ca) as client, http:
        # Every replica has served, so nginx holds a connection to each.
        for _ in range(2 * len(replicas)):
            await client.list_sessions()
            assert (await http.get("/api/sessions")).status_code == 200
        dead = replicas[0]
        dead.process.send_signal(signal.SIGKILL)
        dead.process.wait(30)
        before = len(nginx.upstreams_used())
        # Every new request is served; a run goes to its end.
        for _ in range(3 * len(replicas)):
            await client.list_sessions()
            assert (await http.get("/api/sessions")).status_code == 200
        kinds = [e.kind async for e in client.run("after the kill")]
        assert kinds[-1] == "@task_state"
    dead_addresses = {dead.grpc_address, dead.http_address}
    after = [line.split(", ") for line in nginx.upstreams_used()[before:]]
    tried_dead = [tried for tried in after if dead_addresses & set(tried)]
    # max_fails=1: only the first request to each upstream (gRPC, HTTP) finds
    # it dead, and that one went on to a live replica; none after was sent there.
    assert sorted(a for tried in tried_dead for a in tried if a in dead_addresses) == sorted(
        dead_addresses
    ), after
    for tried in tried_dead:
        assert tried[-1] not in dead_addresses, after
    served_after = [tried[-1] for tried in after]
    assert not dead_addresses & set(served_after)
    assert len(set(served_after)) == 2 * (len(replicas) - 1), after  # both others, both ports


def test_debians_nginx_has_no_active_health_checks(tmp_path: Path) -> None:
    """The guide says `health_check` (active checks) is NGINX Plus only: the
    nginx the guide is tested with refuses it."""
    certs = tmp_path / "certs"
    certs.mkdir()
    make_certs(certs)
    site = site_config(["127.0.0.1:1"], ["127.0.0.1:2"], free_port(), certs).replace(
        "grpc_pass grpc://omni_grpc;\n    }",
        "grpc_pass grpc://omni_grpc;\n        health_check type=grpc;\n    }",
    )
    assert "health_check type=grpc" in site
    with pytest.raises(AssertionError, match='unknown directive "health_check"'):
        Nginx(tmp_path / "nginx", site).start()
