"""The server side of the browser tests: a real hub behind the real HTTP app."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx

from omni_grpc.engines.base import Engine
from omni_grpc.engines.demo import DemoEngine
from omni_grpc.runtime.hub import Hub
from omni_grpc.runtime.resumption import ResumeLimits
from omni_grpc.transport.sse.app import create_app
from omni_grpc.transport.sse.server import HttpServer

TOKEN = "browser-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@asynccontextmanager
async def page_server(
    tmp_path: Path,
    engine: Engine | None = None,
    port: int = 0,
    tls: Path | None = None,
    resume: ResumeLimits | None = None,
) -> AsyncIterator[tuple[Hub, str]]:
    """``tls``: a ``certs`` directory: HTTPS with its server.pem and server.key;
    ``resume``: the hub's resumption limits (its default when None)."""
    hub = Hub(engine or DemoEngine(pacing=0.03), tmp_path / "data", resume=resume)
    server = HttpServer(
        create_app(hub, token=TOKEN),
        port=port,
        tls_cert=tls / "server.pem" if tls else None,
        tls_key=tls / "server.key" if tls else None,
    )
    await server.start()
    try:
        yield hub, server.url
    finally:
        await hub.shutdown()
        await server.stop()


async def run_turns(url: str, prompts: list[str], session: str | None = None) -> str:
    """Runs each prompt to its end over the dialect route; the session's id."""
    async with httpx.AsyncClient(base_url=url, headers=AUTH, timeout=60) as http:
        for prompt in prompts:
            body: dict[str, object] = {"prompt": prompt}
            if session is not None:
                body["session_id"] = session
            r = await http.post("/v1/runs", json=body)
            assert r.status_code == 200, r.text
            assert "event: done" in r.text, r.text
            session = r.headers["omni-session-id"]
    assert session is not None
    return session
