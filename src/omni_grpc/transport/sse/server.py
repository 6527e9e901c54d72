"""Runs the SSE app under uvicorn inside the caller's event loop.

Used by ``omni-grpc serve`` (beside the gRPC server) and by the tests, which
bind port 0 and read the port the OS chose.

A server that is going to close its connections says so first: while
``closing()`` holds (the server drains) and once it stops, every response
carries ``Connection: close`` and its connection ends after it. A client
then opens its next request on a new connection (to another replica, behind
a load balancer) instead of reusing one the server is about to close, where
the request would get no answer at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import socket
import ssl
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import uvicorn
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from omni_grpc.transport.sse.connections import LimitedH11Protocol
from omni_grpc.transport.sse.http2 import H2Protocol
from omni_grpc.transport.sse.http_limits import HttpLimits


class _Server(uvicorn.Server):
    """uvicorn's server without its signal handlers: the process's owner
    (``omni-grpc serve``) decides what SIGTERM means. uvicorn's own would stop
    the HTTP side at the first signal, in the middle of a drain, and raise the
    signal again once it stopped."""

    # The TLS handshake's deadline (the header timeout); None without TLS.
    handshake_timeout: float | None = None

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        """uvicorn's startup, its listener given a TLS handshake deadline.

        asyncio waits 60 s for a handshake, and a connection counts against
        the cap only once it is done: clients that open TLS connections and
        stall would hold descriptors outside the cap for a minute each.
        uvicorn passes no deadline to ``create_server``, so it is added here
        for the one call its startup makes."""
        if self.handshake_timeout is None:
            await super().startup(sockets)
            return
        loop = asyncio.get_running_loop()
        create_server = loop.create_server
        try:
            loop.create_server = functools.partial(  # type: ignore[method-assign]
                create_server, ssl_handshake_timeout=self.handshake_timeout
            )
        except AttributeError:  # a loop in C (uvloop): its 60 s stay
            await super().startup(sockets)
            return
        try:
            await super().startup(sockets)
        finally:
            del loop.create_server  # the loop's own method again


class _CloseWhen:
    """Adds ``Connection: close`` to responses started while ``closing()``."""

    def __init__(self, app: ASGIApp, closing: Callable[[], bool]) -> None:
        self.app = app
        self.closing = closing

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start" and self.closing():
                headers = [
                    (name, value)
                    for name, value in message.get("headers", [])
                    if name.lower() != b"connection"
                ]
                message = {**message, "headers": [*headers, (b"connection", b"close")]}
            await send(message)

        await self.app(scope, receive, sending)


class HttpServer:
    def __init__(
        self,
        app: ASGIApp,
        *,
        host: str = "127.0.0.1",
        port: int = 8080,
        log_level: str = "warning",
        shutdown_grace: int = 2,
        limits: HttpLimits | None = None,
        closing: Callable[[], bool] = lambda: False,
        tls_cert: Path | None = None,
        tls_key: Path | None = None,
        tls_client_ca: Path | None = None,
    ) -> None:
        """``closing``: whether the server is about to close its connections
        (it drains), so responses say ``Connection: close``. ``tls_cert`` and
        ``tls_key``: serve HTTPS (HTTP/2 chosen by ALPN, else HTTP/1.1);
        ``tls_client_ca``: and require client certificates from this CA."""
        limits = limits or HttpLimits()
        self.host = host
        self.port = port
        self._stopping = False
        self.tls = tls_cert is not None
        tls: dict[str, Any] = {}
        if tls_cert is not None:
            tls = {"ssl_certfile": str(tls_cert), "ssl_keyfile": str(tls_key or tls_cert)}
            if tls_client_ca is not None:
                tls |= {"ssl_ca_certs": str(tls_client_ca), "ssl_cert_reqs": ssl.CERT_REQUIRED}
        # No Server/Date headers: the SSE response headers are exactly the reference's.
        self._config = uvicorn.Config(
            _CloseWhen(app, lambda: self._stopping or closing()),
            log_level=log_level,
            lifespan="off",
            server_header=False,
            date_header=False,
            timeout_graceful_shutdown=shutdown_grace,
            http=LimitedH11Protocol.with_limits(limits),
            timeout_keep_alive=limits.idle_timeout,
            backlog=limits.accept_batch,
            **tls,
        )
        self._server = _Server(self._config)
        if tls_cert is not None:
            self._server.handshake_timeout = limits.header_timeout
        self._task: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'https' if self.tls else 'http'}://{host}:{self.port}"

    async def start(self) -> None:
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets that say
        # they are TCP, and accepted sockets inherit the listener's protocol.
        # Without it Nagle holds each keep-alive response for about 40 ms.
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            sock.bind((self.host, self.port))
        except OSError:
            sock.close()
            raise
        self.port = sock.getsockname()[1]
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]), name="omni-http")
        while not self._server.started:
            if self._task.done():
                self._task.result()  # re-raises what stopped it
                raise RuntimeError("the HTTP server stopped during startup")
            await asyncio.sleep(0.01)

    def connection_sockets(self) -> list[socket.socket]:
        """The sockets of the open client connections (for checks and tests)."""
        sockets = []
        for connection in self._server.server_state.connections:
            transport = getattr(connection, "transport", None)
            sock = transport.get_extra_info("socket") if transport is not None else None
            if sock is not None:
                sockets.append(sock)
        return sockets

    def connection_versions(self) -> list[str]:
        """The HTTP version each open client connection speaks ("1.1", "2")."""
        return [
            "2" if isinstance(connection, H2Protocol) else "1.1"
            for connection in self._server.server_state.connections
        ]

    async def stop(self) -> None:
        self._stopping = True
        if self._task is None:
            return
        self._server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self._task = None

    async def wait(self) -> None:
        """Until the server stops (after ``stop`` or a fatal error)."""
        if self._task is not None:
            await self._task
