"""A /v1/runs reader too slow for the buffer is told so: an ``error`` event and
a ``done`` that does not say completed, never a silently shortened reply."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import orjson
from waiting import until

from omni_grpc.engines.demo import DemoEngine
from omni_grpc.runtime import bodies
from omni_grpc.runtime.fanout import Subscriber
from omni_grpc.runtime.hub import Hub
from omni_grpc.runtime.memory_log import MemoryEventLog
from omni_grpc.transport.sse.app import create_app
from omni_grpc.transport.sse.server import HttpServer


def dechunk(raw: bytes) -> bytes:
    head, _, body = raw.partition(b"\r\n\r\n")
    assert b" 200 " in head.split(b"\r\n")[0], head
    out = bytearray()
    while body:
        size_line, _, rest = body.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            break
        out += rest[:size]
        body = rest[size + 2 :]
    return bytes(out)


def dialect_events(stream: bytes) -> list[tuple[str, dict[str, object]]]:
    events = []
    for block in stream.split(b"\n\n"):
        fields = dict(line.split(b": ", 1) for line in block.split(b"\n") if line and b": " in line)
        if b"event" in fields:
            events.append((fields[b"event"].decode(), orjson.loads(fields[b"data"])))
    return events


async def test_a_reader_that_falls_behind_gets_error_and_a_failed_done(tmp_path: Path) -> None:
    logs: list[MemoryEventLog] = []
    subscriptions: list[Subscriber] = []

    def small_log(_sid: str) -> MemoryEventLog:
        log = MemoryEventLog(bodies.resync_required_body(), max_count=32)
        original = log.subscribe

        async def subscribe(*args: object, **kw: object) -> Subscriber:
            sub = await original(*args, **kw)  # type: ignore[arg-type]
            subscriptions.append(sub)
            return sub

        log.subscribe = subscribe  # type: ignore[method-assign]
        logs.append(log)
        return log

    hub = Hub(DemoEngine(repeat=400), tmp_path / "data", log_factory=small_log)
    server = HttpServer(create_app(hub, heartbeat=None), port=0)
    await server.start()
    try:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", server.port))
        # A small limit: the stream reader stops taking bytes off the socket.
        reader, writer = await asyncio.open_connection(sock=sock, limit=1024)
        # Small kernel buffers on both ends, so the server's writes block soon.
        await until(lambda: server.connection_sockets(), "the accepted connection")
        for accepted in server.connection_sockets():
            accepted.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        body = b'{"prompt":"hello"}'
        writer.write(
            b"POST /v1/runs HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
            b"Content-Type: application/json\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
        )
        await writer.drain()
        # Read nothing until the hub has cut this reader off.
        await until(lambda: subscriptions and subscriptions[0].cutoffs > 0, "a cut-off")
        raw = await reader.read()
        writer.close()
        events = dialect_events(dechunk(raw))
        names = [name for name, _ in events]
        assert names[-2:] == ["error", "done"], names[-5:]
        assert events[-2][1]["code"] == "resync_required"
        assert events[-1][1]["status"] != "completed"
        assert names.count("done") == 1
        # The run ends either way (stopped for the reader, or already done).
        [info] = await hub.list_sessions()
        await hub.wait_idle(info.session_id)
    finally:
        await hub.shutdown()
        await server.stop()
