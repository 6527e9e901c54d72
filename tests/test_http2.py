"""HTTP/2 on the HTTP port (issue 42): h2c with prior knowledge and by
``Upgrade: h2c``, h2 over TLS chosen by ALPN, and the listener's limits
(header, body and idle timeouts, the connection cap, the drain's
``Connection: close``) kept over HTTP/2 as over HTTP/1.1.

The limit tests speak HTTP/2 frame by frame (the ``h2`` package as a client
on a raw socket) so they can stop where a slow or hostile client stops."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import h2.config
import h2.connection
import h2.events
import h2.settings
import httpx
import orjson
import pytest
from starlette.types import Receive, Scope, Send

from omni_grpc.engines.demo import DemoEngine
from omni_grpc.runtime.approvals import ApprovalMode
from omni_grpc.runtime.hub import Hub
from omni_grpc.transport.sse.app import create_app
from omni_grpc.transport.sse.http2 import MAX_HEADER_LIST, MAX_STREAMS, STREAM_WINDOW
from omni_grpc.transport.sse.http_limits import HttpLimits
from omni_grpc.transport.sse.server import HttpServer

WAIT = 20.0  # an upper bound on what should take well under a second


async def echo_app(scope: Scope, receive: Receive, send: Send) -> None:
    """Answers what it read and how: the body's length, its HTTP version, its Host."""
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    headers = dict(scope["headers"])
    answer = {
        "length": len(body),
        "http_version": scope["http_version"],
        "host": headers.get(b"host", b"").decode(),
        "scheme": scope["scheme"],
    }
    if b"cookie" in headers:
        answer["cookie"] = headers[b"cookie"].decode()
    extra = [(b"connection", b"close")] if scope["path"] == "/close" else []
    if scope["path"] == "/big":
        payload = b"x" * int(scope["query_string"] or b"0")
    else:
        payload = orjson.dumps(answer)
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"application/json"), *extra],
        }
    )
    await send({"type": "http.response.body", "body": payload})


@asynccontextmanager
async def echo_server(**kwargs: Any) -> AsyncIterator[HttpServer]:
    server = HttpServer(echo_app, port=0, **kwargs)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


class RawH2:
    """An HTTP/2 client on a socket, one frame at a time."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.conn = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=True, header_encoding=None)
        )
        self.events: list[h2.events.Event] = []
        self.closed = False

    @classmethod
    async def open(cls, port: int, *, preface: bool = True) -> RawH2:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        client = cls(reader, writer)
        if preface:
            client.conn.initiate_connection()
            await client.flush()
        return client

    async def flush(self) -> None:
        self.writer.write(self.conn.data_to_send())
        await self.writer.drain()

    async def read_once(self) -> bool:
        try:
            data = await asyncio.wait_for(self.reader.read(65536), WAIT)
        except ConnectionResetError:
            data = b""
        if not data:
            self.closed = True
            return False
        self.events += self.conn.receive_data(data)
        await self.flush()
        return True

    async def until(self, done: Any) -> None:
        while not done():
            if not await self.read_once():
                return

    async def until_closed(self) -> None:
        while await self.read_once():
            pass

    def request(self, path: str, *, method: str = "GET", end: bool = True, extra: Any = ()) -> int:
        sid = self.conn.get_next_available_stream_id()
        headers = [
            (b":method", method.encode()),
            (b":path", path.encode()),
            (b":scheme", b"http"),
            (b":authority", b"127.0.0.1"),
            *extra,
        ]
        self.conn.send_headers(sid, headers, end_stream=end)
        return sid

    def response(self, sid: int) -> tuple[int, bytes] | None:
        status, body, ended = 0, b"", False
        for event in self.events:
            if getattr(event, "stream_id", None) != sid:
                continue
            if isinstance(event, h2.events.ResponseReceived):
                status = int(dict(event.headers or [])[b":status"])
            elif isinstance(event, h2.events.DataReceived):
                body += event.data or b""
            elif isinstance(event, h2.events.StreamEnded):
                ended = True
        return (status, body) if ended else None

    def goaway(self) -> bool:
        return any(isinstance(e, h2.events.ConnectionTerminated) for e in self.events)

    def close(self) -> None:
        self.writer.close()


async def test_h2c_prior_knowledge_serves_the_app_and_sse_runs(tmp_path: Path) -> None:
    hub = Hub(DemoEngine(), tmp_path / "data", default_approval=ApprovalMode.ALLOW_ALL)
    server = HttpServer(create_app(hub), port=0)
    await server.start()
    try:
        async with httpx.AsyncClient(http1=False, http2=True, base_url=server.url) as http:
            listed = await http.get("/api/sessions")
            assert listed.http_version == "HTTP/2" and listed.status_code == 200
            async with http.stream("POST", "/v1/runs", json={"prompt": "hello h2"}) as run:
                assert run.http_version == "HTTP/2" and run.status_code == 200
                assert run.headers["content-type"].startswith("text/event-stream")
                text = b"".join([chunk async for chunk in run.aiter_bytes()]).decode()
            assert "hello h2" in text and text.count("data:") > 2
            # A refusal of the app's own (the Host check) answers as over HTTP/1.1.
            refused = await http.get("/api/sessions", headers={"host": "evil.example"})
            assert refused.status_code == 403 and refused.http_version == "HTTP/2"
    finally:
        await hub.shutdown()
        await server.stop()


async def test_upgrade_h2c_switches_a_bodyless_request_and_answers_others_on_h1() -> None:
    async with echo_server() as server:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        client = RawH2(reader, writer)
        settings = client.conn.initiate_upgrade_connection()
        assert settings is not None
        writer.write(
            b"GET /up HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: Upgrade, HTTP2-Settings\r\n"
            b"upgrade: h2c\r\nhttp2-settings: " + settings + b"\r\n\r\n"
        )
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), WAIT)
        assert head.startswith(b"HTTP/1.1 101 ")
        await client.flush()  # the client's preface, after the 101
        await client.until(lambda: client.response(1) is not None)
        status, body = client.response(1) or (0, b"")
        assert status == 200 and orjson.loads(body)["http_version"] == "2"
        # The connection goes on over HTTP/2; split cookies are one header again.
        sid = client.request("/again", extra=[(b"cookie", b"a=1"), (b"cookie", b"b=2")])
        await client.flush()
        await client.until(lambda: client.response(sid) is not None)
        status, body = client.response(sid) or (0, b"")
        assert status == 200 and orjson.loads(body)["cookie"] == "a=1; b=2"
        client.close()

        # With a body the upgrade is declined and the request answered over HTTP/1.1.
        async with httpx.AsyncClient(base_url=server.url) as http:
            answer = await http.post(
                "/body",
                content=b"12345",
                headers={"connection": "Upgrade, HTTP2-Settings", "upgrade": "h2c",
                         "http2-settings": settings.decode()},
            )  # fmt: skip
        assert answer.status_code == 200 and answer.http_version == "HTTP/1.1"
        assert orjson.loads(answer.content) == {
            "length": 5, "http_version": "1.1", "host": f"127.0.0.1:{server.port}",
            "scheme": "http",
        }  # fmt: skip


async def test_tls_chooses_h2_by_alpn_and_keeps_http1(certs: Path) -> None:
    async with echo_server(tls_cert=certs / "server.pem", tls_key=certs / "server.key") as server:
        assert server.url.startswith("https://")
        context = ssl.create_default_context(cafile=str(certs / "ca.pem"))
        async with httpx.AsyncClient(http2=True, verify=context, base_url=server.url) as http:
            answer = await http.post("/x", content=b"a" * 100_000)
        assert answer.http_version == "HTTP/2"
        assert orjson.loads(answer.content) == {
            "length": 100_000, "http_version": "2", "host": f"127.0.0.1:{server.port}",
            "scheme": "https",
        }  # fmt: skip
        async with httpx.AsyncClient(verify=context, base_url=server.url) as http:
            answer = await http.get("/x")
        assert answer.http_version == "HTTP/1.1"
        assert orjson.loads(answer.content)["scheme"] == "https"
        # Plain HTTP on the TLS port gets nothing served.
        async with httpx.AsyncClient(base_url=server.url.replace("https", "http")) as http:
            with pytest.raises(httpx.HTTPError):
                await http.get("/x")


async def test_tls_client_ca_requires_a_client_certificate(certs: Path) -> None:
    async with echo_server(
        tls_cert=certs / "server.pem", tls_key=certs / "server.key",
        tls_client_ca=certs / "ca.pem",
    ) as server:  # fmt: skip
        context = ssl.create_default_context(cafile=str(certs / "ca.pem"))
        async with httpx.AsyncClient(http2=True, verify=context, base_url=server.url) as http:
            with pytest.raises(httpx.HTTPError):
                await http.get("/x")
        context.load_cert_chain(certs / "client.pem", certs / "client.key")
        async with httpx.AsyncClient(http2=True, verify=context, base_url=server.url) as http:
            answer = await http.get("/x")
        assert answer.status_code == 200 and answer.http_version == "HTTP/2"


async def test_large_bodies_both_ways_within_the_flow_control_windows() -> None:
    size = 3 * 1024 * 1024 + 17  # many stream windows, several connection windows
    async with (
        echo_server() as server,
        httpx.AsyncClient(http1=False, http2=True, base_url=server.url) as http,
    ):
        up, down = await asyncio.gather(
            http.post("/up", content=b"u" * size), http.get(f"/big?{size}")
        )
        assert orjson.loads(up.content)["length"] == size
        assert down.content == b"x" * size


async def test_header_timeout_ends_a_connection_that_sends_no_request() -> None:
    limits = HttpLimits(header_timeout=0.5)
    async with echo_server(limits=limits) as server:
        client = await RawH2.open(server.port)  # the preface and SETTINGS, no request
        await client.until_closed()
        assert client.goaway()

        # Part of a HEADERS frame after a finished request: the same deadline.
        client = await RawH2.open(server.port)
        sid = client.request("/one")
        await client.flush()
        await client.until(lambda: client.response(sid) is not None)
        client.request("/two")
        frames = client.conn.data_to_send()
        client.writer.write(frames[: len(frames) - 3])
        await client.until_closed()
        assert client.goaway()


async def test_idle_timeout_ends_a_connection_with_no_open_stream() -> None:
    async with echo_server(limits=HttpLimits(idle_timeout=1)) as server:
        client = await RawH2.open(server.port)
        sid = client.request("/one")
        await client.flush()
        await client.until(lambda: client.response(sid) is not None)
        await client.until_closed()
        assert client.goaway()


async def test_body_timeout_answers_408_on_the_stalled_stream() -> None:
    async with echo_server(limits=HttpLimits(body_timeout=0.5)) as server:
        client = await RawH2.open(server.port)
        sid = client.request("/slow", method="POST", end=False)
        client.conn.send_data(sid, b"part of it")
        await client.flush()
        await client.until(lambda: client.response(sid) is not None)
        status, body = client.response(sid) or (0, b"")
        assert status == 408 and orjson.loads(body)["error"]["code"] == "request_timeout"
        # The connection still serves.
        other = client.request("/next")
        await client.flush()
        await client.until(lambda: client.response(other) is not None)
        assert (client.response(other) or (0,))[0] == 200


async def test_a_header_list_over_the_limit_is_431_and_the_connection_goes_on() -> None:
    async with echo_server() as server:
        client = await RawH2.open(server.port)
        big = [(b"x-big", b"v" * (MAX_HEADER_LIST + 1))]
        sid = client.request("/big-head", extra=big)
        await client.flush()
        await client.until(lambda: client.response(sid) is not None)
        status, body = client.response(sid) or (0, b"")
        assert status == 431
        assert orjson.loads(body)["error"]["code"] == "request_header_fields_too_large"
        assert not client.goaway()
        sid = client.request("/after")
        await client.flush()
        await client.until(lambda: client.response(sid) is not None)
        assert (client.response(sid) or (0,))[0] == 200


async def test_connection_cap_counts_h2_connections_and_reclaims_idle_ones() -> None:
    async with echo_server(limits=HttpLimits(max_connections=2)) as server:
        first = await RawH2.open(server.port)
        second = await RawH2.open(server.port)
        for client in (first, second):  # both served, then idle
            sid = client.request("/one")
            await client.flush()
            await client.until(lambda c=client, s=sid: c.response(s) is not None)
        third = await RawH2.open(server.port)
        sid = third.request("/three")
        await third.flush()
        await third.until(lambda: third.response(sid) is not None)
        assert (third.response(sid) or (0,))[0] == 200
        # One of the idle two gave its place (GOAWAY, then closed).
        done = await asyncio.wait(
            [asyncio.ensure_future(first.until_closed()),
             asyncio.ensure_future(second.until_closed())],
            return_when=asyncio.FIRST_COMPLETED, timeout=WAIT,
        )  # fmt: skip
        assert done[0]
        for client in (first, second, third):
            client.close()


async def test_connection_close_from_the_app_is_goaway_after_the_response() -> None:
    async with echo_server() as server:
        client = await RawH2.open(server.port)
        sid = client.request("/close")
        await client.flush()
        await client.until_closed()
        assert client.goaway() and (client.response(sid) or (0,))[0] == 200


async def test_unread_request_data_is_not_held_past_a_stream_window() -> None:
    """A client that sends more than the window without the app reading is
    held by flow control: the server never buffers more than the window."""
    gate = asyncio.Event()

    async def slow_reader(scope: Scope, receive: Receive, send: Send) -> None:
        await gate.wait()
        total = 0
        while True:
            message = await receive()
            total += len(message.get("body", b""))
            if not message.get("more_body"):
                break
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": str(total).encode()})

    server = HttpServer(slow_reader, port=0)
    await server.start()
    try:
        client = await RawH2.open(server.port)
        sid = client.request("/up", method="POST", end=False)
        await client.flush()
        await client.until(
            lambda: any(isinstance(e, h2.events.RemoteSettingsChanged) for e in client.events)
        )
        assert client.conn.local_flow_control_window(sid) == STREAM_WINDOW
        for _ in range(0, STREAM_WINDOW, 16384):
            client.conn.send_data(sid, b"d" * 16384)
        await client.flush()
        assert client.conn.local_flow_control_window(sid) == 0
        gate.set()  # the app reads: the window opens again
        await client.until(lambda: client.conn.local_flow_control_window(sid) > 0)
        client.conn.send_data(sid, b"e" * 10, end_stream=True)
        await client.flush()
        await client.until(lambda: client.response(sid) is not None)
        assert client.response(sid) == (200, str(STREAM_WINDOW + 10).encode())
        client.close()
    finally:
        await server.stop()


async def test_h2_settings_are_what_the_module_says() -> None:
    async with echo_server() as server:
        client = await RawH2.open(server.port)
        await client.until(
            lambda: any(isinstance(e, h2.events.RemoteSettingsChanged) for e in client.events)
        )
        remote = client.conn.remote_settings
        assert remote[h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS] == 100
        assert remote[h2.settings.SettingCodes.INITIAL_WINDOW_SIZE] == STREAM_WINDOW
        client.close()


async def test_a_busy_h2_connection_keeps_its_place_and_the_next_gets_503() -> None:
    async with echo_server(limits=HttpLimits(max_connections=1)) as server:
        busy = await RawH2.open(server.port)
        sid = busy.request("/upload", method="POST", end=False)  # a stream left open
        await busy.flush()
        await busy.until(
            lambda: any(isinstance(e, h2.events.RemoteSettingsChanged) for e in busy.events)
        )
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        refused = await asyncio.wait_for(reader.read(), WAIT)
        assert refused.startswith(b"HTTP/1.1 503 ") and b"too_many_connections" in refused
        writer.close()
        # The busy connection was not the one closed: its stream still finishes.
        busy.conn.send_data(sid, b"abc", end_stream=True)
        await busy.flush()
        await busy.until(lambda: busy.response(sid) is not None)
        status, body = busy.response(sid) or (0, b"")
        assert status == 200 and orjson.loads(body)["length"] == 3
        busy.close()


async def test_a_draining_server_sends_goaway_after_the_response() -> None:
    draining = False
    async with echo_server(closing=lambda: draining) as server:
        client = await RawH2.open(server.port)
        first = client.request("/one")
        await client.flush()
        await client.until(lambda: client.response(first) is not None)
        assert not client.goaway()
        draining = True
        second = client.request("/two")
        await client.flush()
        await client.until_closed()
        assert (client.response(second) or (0,))[0] == 200 and client.goaway()


async def test_streams_reset_at_once_do_not_run_more_than_the_stream_limit() -> None:
    """HTTP/2 rapid reset: each stream is opened and reset at once, while the
    app of each ignores the reset and keeps going; at most MAX_STREAMS run."""
    gate = asyncio.Event()
    started = 0

    async def stubborn(scope: Scope, receive: Receive, send: Send) -> None:
        nonlocal started
        started += 1
        await gate.wait()

    server = HttpServer(stubborn, port=0)
    await server.start()
    try:
        client = await RawH2.open(server.port)
        await client.until(
            lambda: any(isinstance(e, h2.events.RemoteSettingsChanged) for e in client.events)
        )
        last = 0
        for _ in range(MAX_STREAMS + 50):
            last = client.request("/r", end=False)
            client.conn.reset_stream(last)
        await client.flush()
        # A PING after them: its answer means the server has read every frame.
        client.conn.ping(b"12345678")
        await client.flush()
        await client.until(
            lambda: any(isinstance(e, h2.events.PingAckReceived) for e in client.events)
        )
        assert started == MAX_STREAMS
        gate.set()
        client.close()
    finally:
        await server.stop()


async def test_a_stalled_tls_handshake_ends_at_the_header_timeout(certs: Path) -> None:
    """A TLS connection counts against the cap only once its handshake is
    done; one that stalls it is ended at the header timeout, not asyncio's 60 s."""
    async with echo_server(
        tls_cert=certs / "server.pem", tls_key=certs / "server.key",
        limits=HttpLimits(header_timeout=0.5),
    ) as server:  # fmt: skip
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        # Nothing sent: the server waits for a ClientHello, then gives up. The
        # bound is far under asyncio's default of 60 s.
        assert await asyncio.wait_for(reader.read(), WAIT) == b""
        writer.close()
