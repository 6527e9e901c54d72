"""One demo run seen several ways gives identical JSON lines: over gRPC, over
reference SSE, over Connect and gRPC-Web on the HTTP port, and re-ingested
from SSE by a second server (``sse+http://``)."""

from __future__ import annotations

import asyncio
import base64
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import grpc
import httpx
from google.protobuf import json_format

from omni_grpc.client.sse import StreamItem, read_reference
from omni_grpc.convert import serialize_message, serialize_server_event
from omni_grpc.server import OmniServer, ServerConfig, build_server
from omni_grpc.transport.grpc import GrpcConfig
from omni_grpc.transport.sse.transport import SseConfig, SseTransport
from omni_grpc_proto.omni.v1 import agent_service_pb2 as svc
from omni_grpc_proto.omni.v1 import agent_service_pb2_grpc as svc_grpc

Line = tuple[str, str]  # (event id, JSON text)


@asynccontextmanager
async def omni_server(data_dir: Path, engine: str = "demo") -> AsyncIterator[OmniServer]:
    server = build_server(
        ServerConfig(
            engine=engine,
            data_dir=data_dir,
            grpc=GrpcConfig(host="127.0.0.1", port=0),
            http=SseConfig(host="127.0.0.1", port=0),
        )
    )
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def http_url(server: OmniServer) -> str:
    return next(t for t in server.transports if isinstance(t, SseTransport)).url


def grpc_address(server: OmniServer) -> str:
    assert server.grpc is not None
    return server.grpc.address


async def grpc_run(address: str, request: svc.RunRequest) -> list[Line]:
    lines: list[Line] = []
    async with grpc.aio.insecure_channel(address) as channel:
        stub = svc_grpc.AgentServiceStub(channel)
        async for response in stub.Run(request):
            if response.WhichOneof("kind") == "message":
                data = serialize_message(response.message)
            else:
                data = serialize_server_event(response.event)
            lines.append((response.event_id, data.decode()))
    return lines


def sse_lines(items: list[StreamItem]) -> list[Line]:
    return [(i.event_id, i.data) for i in items]


def engine_messages(lines: list[Line]) -> list[str]:
    """The messages the engine produced: between the task's running and idle
    states, without control events (B's engine answers A's approval_request
    itself instead of passing it on)."""
    texts = [text for _, text in lines]
    start = texts.index('{"type":"task_state","state":"running","queued":0}')
    end = texts.index('{"type":"task_state","state":"idle","queued":0}', start)
    return [t for t in texts[start + 1 : end] if t.startswith('{"timestamp"')]


async def test_grpc_sse_and_reingested_sse_agree(tmp_path: Path) -> None:
    async with omni_server(tmp_path / "a") as a:
        async with httpx.AsyncClient(base_url=http_url(a), timeout=10) as http:
            sid = (await http.post("/api/sessions", json={})).json()["session"]["sessionId"]
            seen: list[StreamItem] = []
            connected = asyncio.Event()

            async def watch() -> None:
                async for item in read_reference(
                    http, f"/api/sessions/{sid}/stream", until_idle=True
                ):
                    seen.append(item)
                    connected.set()

            watcher = asyncio.create_task(watch())
            await asyncio.wait_for(connected.wait(), 5)
            over_grpc = await grpc_run(
                grpc_address(a), svc.RunRequest(session_id=sid, prompt="three ways")
            )
            await asyncio.wait_for(watcher, 10)

        # gRPC and SSE: the same events with the same ids, byte for byte (the SSE
        # subscriber also got its own connect-time task_state first).
        over_sse = sse_lines(seen)
        assert over_sse[1:] == over_grpc
        assert len(over_grpc) > 30

        # Re-ingested: server B's engine is server A's SSE stream.
        async with omni_server(tmp_path / "b", engine=f"sse+{http_url(a)}") as b:
            via_b = await grpc_run(grpc_address(b), svc.RunRequest(prompt="three ways"))
        upstream = [s for s in await a.hub.list_sessions() if s.session_id != sid]
        assert len(upstream) == 1
        # A's whole buffer for the upstream session, replayed from seq 0.
        epoch = (upstream[0].last_event_id or "").rsplit("-", 1)[0]
        replayed: list[StreamItem] = []
        async with httpx.AsyncClient(base_url=http_url(a), timeout=10) as http:
            async for item in read_reference(
                http,
                f"/api/sessions/{upstream[0].session_id}/stream",
                last_event_id=f"{epoch}-0",
                until_idle=True,
            ):
                replayed.append(item)
        a_engine = engine_messages(sse_lines(replayed))
        assert engine_messages(via_b) == a_engine
        assert len(a_engine) > 30
        # A asked B (ask mode upstream), and B's own policy (allow-all) answered.
        assert any('"type":"approval_request"' in text for _, text in sse_lines(replayed))
        assert any('"decision":"allow"' in text for text in a_engine)


# The content types of the HTTP port's other protocols, and whether their
# bodies are base64 (gRPC-Web-text).
HTTP_PROTOCOLS = {
    "connect+proto": ("application/connect+proto", False),
    "connect+json": ("application/connect+json", False),
    "grpc-web": ("application/grpc-web+proto", False),
    "grpc-web-text": ("application/grpc-web-text", True),
}


def _frames(body: bytes) -> tuple[list[bytes], bytes]:
    """The complete messages in ``body`` and the bytes after them."""
    out, at = [], 0
    while at + 5 <= len(body):
        flags, length = struct.unpack_from(">BI", body, at)
        if at + 5 + length > len(body):
            break
        if not flags & 0x82:  # not an end-of-stream or trailers frame
            out.append(body[at + 5 : at + 5 + length])
        at += 5 + length
    return out, body[at:]


async def http_attach(
    http: httpx.AsyncClient, name: str, session_id: str, ready: asyncio.Event
) -> list[Line]:
    """Attach over Connect or gRPC-Web until the session's next task ends."""
    content_type, text = HTTP_PROTOCOLS[name]
    request = svc.AttachRequest(session_id=session_id)
    if name == "connect+json":
        data = json_format.MessageToJson(request).encode()
    else:
        data = request.SerializeToString()
    body = struct.pack(">BI", 0, len(data)) + data
    lines: list[Line] = []
    async with http.stream(
        "POST",
        "/omni.v1.AgentService/Attach",
        content=base64.b64encode(body) if text else body,
        headers={"content-type": content_type},
    ) as response:
        assert response.status_code == 200
        buffered = b""
        pending = b""
        async for chunk in response.aiter_bytes():
            if text:
                # Each frame is its own base64 run (4-byte groups).
                pending += chunk
                whole = len(pending) - len(pending) % 4
                buffered += base64.b64decode(pending[:whole])
                pending = pending[whole:]
            else:
                buffered += chunk
            messages, buffered = _frames(buffered)
            for message in messages:
                if name == "connect+json":
                    decoded = json_format.Parse(message, svc.AttachResponse())
                else:
                    decoded = svc.AttachResponse.FromString(message)
                if decoded.WhichOneof("kind") == "message":
                    line = serialize_message(decoded.message)
                else:
                    line = serialize_server_event(decoded.event)
                lines.append((decoded.event_id, line.decode()))
                ready.set()
                if line == b'{"type":"task_state","state":"idle","queued":0}' and len(lines) > 1:
                    return lines
    raise AssertionError(f"{name}: the stream ended before the task did")


async def test_grpc_connect_grpc_web_and_sse_agree(tmp_path: Path) -> None:
    """One run, watched live over SSE, Connect (proto and JSON) and gRPC-Web
    (binary and text) while gRPC runs it: the same events, ids and order."""
    async with omni_server(tmp_path / "a") as a:
        async with httpx.AsyncClient(base_url=http_url(a), timeout=10) as http:
            sid = (await http.post("/api/sessions", json={})).json()["session"]["sessionId"]
            seen: list[StreamItem] = []
            connected = asyncio.Event()

            async def watch() -> None:
                async for item in read_reference(
                    http, f"/api/sessions/{sid}/stream", until_idle=True
                ):
                    seen.append(item)
                    connected.set()

            readies = {name: asyncio.Event() for name in HTTP_PROTOCOLS}
            watchers = [asyncio.create_task(watch())] + [
                asyncio.create_task(http_attach(http, name, sid, readies[name]))
                for name in HTTP_PROTOCOLS
            ]
            for event in (connected, *readies.values()):
                await asyncio.wait_for(event.wait(), 5)
            over_grpc = await grpc_run(
                grpc_address(a), svc.RunRequest(session_id=sid, prompt="five ways")
            )
            _, *others = await asyncio.wait_for(asyncio.gather(*watchers), 10)

        assert len(over_grpc) > 30
        # Each stream's own connect-time task_state comes first.
        assert sse_lines(seen)[1:] == over_grpc
        for name, lines in zip(HTTP_PROTOCOLS, others, strict=True):
            assert lines[1:] == over_grpc, name
