"""Policies that hold without a token: the operator's approval modes, Host and
Origin checks against DNS rebinding and cross-site requests, JSON bodies only,
and a Content-Security-Policy on the page."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from conftest import ServerFactory
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from omni_grpc.engines.demo import DemoEngine
from omni_grpc.runtime.approvals import ApprovalMode
from omni_grpc.runtime.hub import Hub
from omni_grpc.transport.sse.app import create_app
from omni_grpc.transport.sse.guard import RequestGuard, default_hosts
from omni_grpc.transport.sse.server import HttpServer
from omni_grpc_proto.omni.v1 import agent_service_pb2 as pb
from omni_grpc_proto.omni.v1 import agent_service_pb2_grpc


@asynccontextmanager
async def http_server(
    tmp_path: Path,
    *,
    approval: ApprovalMode = ApprovalMode.ALLOW_ALL,
    client_modes: tuple[ApprovalMode, ...] | None = None,
    **app_options: Any,
) -> AsyncIterator[tuple[Hub, httpx.AsyncClient]]:
    hub = Hub(DemoEngine(), tmp_path / "data", default_approval=approval, client_modes=client_modes)
    server = HttpServer(create_app(hub, **app_options), port=0)
    await server.start()
    try:
        async with httpx.AsyncClient(base_url=server.url, timeout=10) as http:
            yield hub, http
    finally:
        await hub.shutdown()
        await server.stop()


# ---- approval modes are a policy ------------------------------------------------------

WIDER = [
    (ApprovalMode.DENY_ALL, None, "allow-all"),
    (ApprovalMode.DENY_ALL, None, "ask"),
    (ApprovalMode.ASK, None, "allow-all"),
    (ApprovalMode.ASK, None, "read-only"),
    (ApprovalMode.READ_ONLY, None, "ask"),
    (ApprovalMode.ASK, (ApprovalMode.ASK, ApprovalMode.DENY_ALL), "allow-all"),
]


@pytest.mark.parametrize(("operator", "allowed", "asked"), WIDER)
async def test_a_wider_mode_is_refused_over_http_naming_it(
    tmp_path: Path, operator: ApprovalMode, allowed: Any, asked: str
) -> None:
    async with http_server(tmp_path, approval=operator, client_modes=allowed) as (hub, http):
        r = await http.post("/v1/runs", json={"prompt": "hi", "approval_mode": asked})
        assert r.status_code == 403, r.text
        assert r.json()["error"]["code"] == "approval_mode_not_allowed"
        assert asked in r.json()["error"]["message"]
        sid = (await http.post("/api/sessions", json={})).json()["session"]["sessionId"]
        r = await http.post(
            f"/api/sessions/{sid}/tasks",
            json={"input": [{"type": "text", "text": "hi"}], "approvalMode": asked},
        )
        assert r.status_code == 403, r.text
        assert all(s.message_count == 0 for s in await hub.list_sessions())  # nothing ran


async def test_allowed_modes_run(tmp_path: Path) -> None:
    modes = (ApprovalMode.ASK, ApprovalMode.DENY_ALL)
    async with http_server(tmp_path, approval=ApprovalMode.ASK, client_modes=modes) as (_, http):
        async with http.stream(
            "POST", "/v1/runs", json={"prompt": "hi", "approval_mode": "deny-all"}
        ) as r:
            assert r.status_code == 200
            body = b"".join([chunk async for chunk in r.aiter_bytes()])
        assert b'"status":"completed"' in body


async def test_a_wider_mode_is_permission_denied_over_grpc(server_factory: ServerFactory) -> None:
    server = await server_factory(approval_mode=ApprovalMode.DENY_ALL)
    assert server.grpc is not None
    async with grpc.aio.insecure_channel(server.grpc.address) as channel:
        stub = agent_service_pb2_grpc.AgentServiceStub(channel)
        for mode in (pb.APPROVAL_MODE_ALLOW_ALL, pb.APPROVAL_MODE_ASK, pb.APPROVAL_MODE_READ_ONLY):
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.Run(pb.RunRequest(prompt="hi", approval_mode=mode)).read()
            assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
            name = pb.ApprovalMode.Name(mode).removeprefix("APPROVAL_MODE_").lower()
            assert name.replace("_", "-") in (refused.value.details() or "")
        ok = [
            r
            async for r in stub.Run(
                pb.RunRequest(prompt="hi", approval_mode=pb.APPROVAL_MODE_DENY_ALL)
            )
        ]
        assert ok[-1].event.task_state.state == pb.SESSION_STATE_IDLE


async def test_the_page_offers_only_the_allowed_modes(tmp_path: Path) -> None:
    modes = (ApprovalMode.ASK, ApprovalMode.DENY_ALL)
    async with http_server(tmp_path, approval=ApprovalMode.ASK, client_modes=modes) as (_, http):
        page = (await http.get("/")).text
    offered = re.findall(r'<option value="([^"]+)"', page)
    assert offered == ["ask", "deny-all"]
    assert re.search(r'<option value="ask" selected>', page)


# ---- Host, Origin, content type ---------------------------------------------------------


async def test_foreign_host_is_refused_everywhere(tmp_path: Path) -> None:
    async with http_server(tmp_path) as (hub, http):
        for path in ("/", "/api/sessions", "/app.js"):
            r = await http.get(path, headers={"host": "evil.example"})
            assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden_host", path
        # DNS rebinding: the attacker's name, the victim's browser, a simple POST.
        r = await http.post(
            "/v1/runs",
            content=b'{"prompt":"rm -rf"}',
            headers={
                "host": "evil.example:8080",
                "origin": "http://evil.example:8080",
                "content-type": "text/plain",
            },
        )
        assert r.status_code == 403
        assert await hub.list_sessions() == []
        for host in ("localhost", f"127.0.0.1:{http.base_url.port}"):
            assert (await http.get("/api/sessions", headers={"host": host})).status_code == 200


async def test_cross_site_posts_are_refused_and_start_nothing(tmp_path: Path) -> None:
    async with http_server(tmp_path) as (hub, http):
        own = str(http.base_url).rstrip("/")
        cross = {"origin": "https://evil.example"}
        r = await http.post("/v1/runs", json={"prompt": "x"}, headers=cross)
        assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden_origin"
        r = await http.post("/api/sessions", json={}, headers={"origin": "null"})
        assert r.status_code == 403
        # A simple (no-preflight) POST without an Origin: refused for its type.
        r = await http.post(
            "/v1/runs", content=b'{"prompt":"x"}', headers={"content-type": "text/plain"}
        )
        assert r.status_code == 415 and r.json()["error"]["code"] == "unsupported_media_type"
        r = await http.post(
            "/v1/runs",
            content=b"prompt=x",
            headers={"content-type": "application/x-www-form-urlencoded"},
        )
        assert r.status_code == 415
        assert await hub.list_sessions() == []
        # The page's own requests (same origin) and clients without Origin work.
        r = await http.post("/api/sessions", json={}, headers={"origin": own})
        assert r.status_code == 201
        r = await http.post(
            "/api/sessions",
            content=b"{}",
            headers={"content-type": "application/json; charset=utf-8"},
        )
        assert r.status_code == 201
        assert (await http.post("/api/sessions")).status_code == 201  # no body, no type


async def test_a_cors_origin_may_post(tmp_path: Path) -> None:
    async with http_server(tmp_path, cors_origins=["https://app.example"]) as (_, http):
        r = await http.post("/api/sessions", json={}, headers={"origin": "https://app.example"})
        assert r.status_code == 201
        r = await http.post("/api/sessions", json={}, headers={"origin": "https://other.example"})
        assert r.status_code == 403


async def test_the_page_has_a_content_security_policy(tmp_path: Path) -> None:
    async with http_server(tmp_path) as (_, http):
        r = await http.get("/")
    csp = r.headers["content-security-policy"]
    assert "default-src 'none'" in csp and "script-src 'self'" in csp
    assert "unsafe-inline" not in csp and "frame-ancestors 'none'" in csp


def test_default_hosts_follow_the_bind_address() -> None:
    guard = RequestGuard(lambda *_: None, allowed_hosts=default_hosts("0.0.0.0"))  # type: ignore[arg-type]
    assert guard.policy.host_allowed("10.1.2.3") and guard.policy.host_allowed("localhost")
    assert not guard.policy.host_allowed("evil.example")
    loopback = RequestGuard(lambda *_: None, allowed_hosts=default_hosts("127.0.0.1"))  # type: ignore[arg-type]
    assert not loopback.policy.host_allowed("10.1.2.3")


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.from_regex(r"[a-z0-9.-]{1,30}", fullmatch=True).filter(
        lambda n: n not in ("localhost", "127.0.0.1")
    ),
    port=st.one_of(st.none(), st.integers(1, 65535)),
)
def test_no_other_name_passes_the_loopback_default(name: str, port: int | None) -> None:
    guard = RequestGuard(lambda *_: None)  # type: ignore[arg-type]
    from omni_grpc.transport.sse.guard import host_name

    host = name if port is None else f"{name}:{port}"
    assert not guard.policy.host_allowed(host_name(host))


async def test_every_mode_outside_the_policy_is_refused_and_every_one_inside_runs(
    tmp_path: Path,
) -> None:
    from itertools import combinations

    from omni_grpc.convert import message_from_dict
    from omni_grpc.protocol import builders
    from omni_grpc.runtime.errors import ModeNotAllowed
    from omni_grpc.runtime.hub import RunRequest

    modes = list(ApprovalMode)
    policies = [c for n in range(1, 5) for c in combinations(modes, n)]
    hub = Hub(DemoEngine(), tmp_path / "data", default_approval=ApprovalMode.ASK)
    try:
        for policy in [None, *policies]:
            hub.client_modes = policy or (ApprovalMode.ASK, ApprovalMode.DENY_ALL)
            for asked in modes:
                request = RunRequest(
                    input=[message_from_dict(builders.user_text("hi"))], approval_mode=asked
                )
                if asked in hub.client_modes:
                    session_id, sub = await hub.run(request)
                    sub.close()
                    await hub.abort(session_id)
                    await hub.wait_idle(session_id)
                else:
                    before = len(await hub.list_sessions())
                    with pytest.raises(ModeNotAllowed) as refused:
                        await hub.run(request)
                    assert asked.value in str(refused.value)
                    assert len(await hub.list_sessions()) == before  # refused before anything
    finally:
        await hub.shutdown()
