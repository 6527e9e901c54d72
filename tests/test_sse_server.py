"""The HTTP listener: accepted connections have Nagle off (TCP_NODELAY)."""

from __future__ import annotations

import socket
from pathlib import Path

import httpx

from omni_grpc.engines.demo import DemoEngine
from omni_grpc.runtime.hub import Hub
from omni_grpc.transport.sse.app import create_app
from omni_grpc.transport.sse.server import HttpServer


async def test_keep_alive_connections_have_tcp_nodelay(tmp_path: Path) -> None:
    hub = Hub(DemoEngine(), tmp_path / "data")
    server = HttpServer(create_app(hub), port=0)
    await server.start()
    try:
        async with httpx.AsyncClient(base_url=server.url) as http:
            for _ in range(2):  # the same keep-alive connection twice
                assert (await http.get("/api/sessions")).status_code == 200
            [sock] = server.connection_sockets()
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
    finally:
        await hub.shutdown()
        await server.stop()
