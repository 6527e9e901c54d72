"""The SSE consumer against a real server, through a proxy that cuts connections."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest

from omni_grpc.client.sse import (
    SSEStreamError,
    StreamItem,
    read_dialect,
    read_reference,
)
from omni_grpc.engines.demo import DemoEngine
from omni_grpc.runtime.hub import Hub
from omni_grpc.transport.sse.app import create_app
from omni_grpc.transport.sse.server import HttpServer


@asynccontextmanager
async def cutting_proxy(upstream_port: int, cut_after: int, cuts: int) -> AsyncIterator[int]:
    """A loopback TCP relay that drops each of its first ``cuts`` connections
    after ``cut_after`` response bytes, mid-frame if that is where it falls."""
    connections = 0

    async def pipe(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, limit: int | None
    ) -> None:
        sent = 0
        try:
            while data := await reader.read(4096):
                if limit is not None and sent + len(data) >= limit:
                    writer.write(data[: limit - sent])
                    await writer.drain()
                    break
                sent += len(data)
                writer.write(data)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        limit = cut_after if connections <= cuts else None
        up_r, up_w = await asyncio.open_connection("127.0.0.1", upstream_port)
        down = asyncio.create_task(pipe(up_r, client_w, limit))
        up = asyncio.create_task(pipe(client_r, up_w, None))
        await down
        up.cancel()
        up_w.close()
        with contextlib.suppress(asyncio.CancelledError):
            await up

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()


async def test_reconnects_with_last_event_id_and_loses_nothing(tmp_path: Path) -> None:
    hub = Hub(DemoEngine(pacing=0.005, repeat=4), tmp_path)
    server = HttpServer(create_app(hub), port=0)
    await server.start()
    try:
        sid = (await hub.create_session()).session_id
        path = f"/api/sessions/{sid}/stream"
        async with (
            cutting_proxy(server.port, cut_after=1500, cuts=3) as proxy_port,
            httpx.AsyncClient(base_url=server.url, timeout=10) as direct,
            httpx.AsyncClient(base_url=f"http://127.0.0.1:{proxy_port}", timeout=10) as flaky,
        ):
            seen: dict[str, list[StreamItem]] = {"direct": [], "flaky": []}
            connected = {name: asyncio.Event() for name in seen}

            async def watch(name: str, client: httpx.AsyncClient) -> None:
                async for item in read_reference(client, path, until_idle=True, retry_delay=0.01):
                    seen[name].append(item)
                    connected[name].set()

            watchers = [
                asyncio.create_task(watch("direct", direct)),
                asyncio.create_task(watch("flaky", flaky)),
            ]
            for event in connected.values():
                await asyncio.wait_for(event.wait(), 5)
            r = await direct.post(f"/api/sessions/{sid}/tasks", json={"prompt": "cut me"})
            assert r.status_code == 202
            await asyncio.wait_for(asyncio.gather(*watchers), 30)
    finally:
        await hub.shutdown()
        await server.stop()

    direct_ids = [i.event_id for i in seen["direct"][1:]]  # [0] is the direct client's unicast
    buffered = set(direct_ids)
    flaky = [(i.event_id, i.data) for i in seen["flaky"] if i.event_id in buffered]
    assert flaky == [(i.event_id, i.data) for i in seen["direct"][1:]]
    # The proxy really cut it: it saw more than one unicast task_state (one per connect).
    unicasts = [i for i in seen["flaky"] if i.event_id not in buffered]
    assert len(unicasts) == 4
    assert all(u.server_event_kind == "task_state" for u in unicasts)
    assert len(seen["direct"]) > 60


async def test_refusals_raise_with_the_servers_code(tmp_path: Path) -> None:
    hub = Hub(DemoEngine(), tmp_path)
    server = HttpServer(create_app(hub, token="t"), port=0)
    await server.start()
    try:
        async with httpx.AsyncClient(base_url=server.url) as http:
            with pytest.raises(SSEStreamError) as info:
                async for _ in read_reference(http, "/api/sessions/x/stream"):
                    pass
            assert info.value.status == 401 and info.value.code == "unauthenticated"
            with pytest.raises(SSEStreamError) as info:
                async for _ in read_reference(http, "/api/sessions/x/stream", token="t"):
                    pass
            assert info.value.status == 404 and info.value.code == "session_not_found"
            with pytest.raises(SSEStreamError) as info:
                async for _ in read_dialect(http, "/v1/runs", {"prompt": ""}, token="t"):
                    pass
            assert info.value.status == 400 and "prompt" in str(info.value)
            events = [e async for e in read_dialect(http, "/v1/runs", {"prompt": "ok"}, token="t")]
            assert events[-1].event == "done"
            assert json.loads(json.dumps(events[-1].data))["status"] == "completed"
    finally:
        await hub.shutdown()
        await server.stop()
