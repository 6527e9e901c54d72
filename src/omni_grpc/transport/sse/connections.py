"""What an HTTP connection may hold: a header-read, a body-read and an idle
timeout, and a cap on open connections per listener.

uvicorn bounds only the wait between keep-alive requests; a connection that
sends no bytes, or half a header, or stops in the middle of a body, stays
open for good, and enough of them use up the process's file descriptors (and
with them the traces and the gRPC side). Each of these now ends:

* **header timeout**: from a connection's opening, or from the first byte of
  a keep-alive connection's next request, until the request's headers are
  complete. Nothing received: closed quietly; part of a header: 408.
* **body timeout**: between two reads of a request body (as nginx's
  ``client_body_timeout``); reads the app paused do not count. 408.
* **idle timeout**: the keep-alive wait between a response and the next
  request's first byte. It is longer than the client pools' own (httpx 5 s,
  Node's undici 4 s, Go 90 s, browsers up to 300 s), so the client closes an
  idle connection first: a server that closes first races a client reusing
  the connection, whose request then gets no answer at all.
* **max connections**: a connection past the cap first takes the place of an
  idle keep-alive connection (closed, as nginx reuses its idle ones); with
  none idle it gets 503 and is closed at once, so the descriptors a run
  needs stay free. The listen backlog is kept small (``accept_batch``), since
  asyncio accepts a whole backlog's worth of connections before the cap sees
  the first.

Defaults and how they compare with nginx's and uvicorn's are in
docs/deployment.md ("Connections and timeouts").
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import h11
from uvicorn.config import Config
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.server import ServerState

from omni_grpc.transport.sse.http2 import H2Protocol, looks_like_preface
from omni_grpc.transport.sse.http_limits import (
    BODY_TIMEOUT,
    HEADER_TIMEOUT,
    TOO_MANY,
    HttpLimits,
)

log = logging.getLogger(__name__)


class LimitedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with the deadlines and the cap of ``HttpLimits``."""

    limits = HttpLimits()
    # uvicorn offers these in the TLS handshake (ALPN): h2 first, as clients prefer.
    alpn_protocols = ["h2", "http/1.1"]

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self._deadline: asyncio.TimerHandle | None = None
        self._received = False
        # Between a response and the next request's first byte.
        self._idle = False
        # Until the first request: bytes that may be HTTP/2's preface.
        self._first: bytes | None = b""

    @classmethod
    def with_limits(cls, limits: HttpLimits) -> type[LimitedH11Protocol]:
        return type("LimitedH11Protocol", (cls,), {"limits": limits})

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.limits.max_connections and not self._reclaim_idle():
            log.warning(
                "HTTP connection refused: %d open, the cap is %d",
                len(self.connections) - 1,
                self.limits.max_connections,
            )
            self._close_with(TOO_MANY)
            return
        ssl_object = transport.get_extra_info("ssl_object")
        if ssl_object is not None and ssl_object.selected_alpn_protocol() == "h2":
            self._hand_off(b"")
            return
        self._await_headers()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_deadline()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._first is not None:
            # h2c with prior knowledge: the connection opens with the preface.
            seen = self._first + data
            if looks_like_preface(seen) and not self.is_ssl():
                if len(seen) < 24:
                    self._first = seen
                    self._received = True
                    return
                self._hand_off(seen)
                return
            self._first = None
            data = seen
        self._received = True
        was_idle, self._idle = self._idle, False
        super().data_received(data)
        if self.transport.is_closing():
            return
        state = self.conn.their_state
        if state is h11.SEND_BODY:
            self._arm(self.limits.body_timeout, self._body_overdue)
        elif state is not h11.IDLE:
            self._cancel_deadline()  # headers (and body) are in: the app has it now
        elif was_idle:  # a next request began: its headers are now due
            self._arm(self.limits.header_timeout, self._headers_overdue)

    def is_ssl(self) -> bool:
        return self.scheme == "https"

    def _h2c_settings(self) -> bytes | None:
        """The HTTP2-Settings of a request that asks ``Upgrade: h2c`` and can
        be upgraded: over plain TCP and without a body (RFC 9113 dropped the
        upgrade; RFC 7540 had the server read a body first, this one answers
        such a request over HTTP/1.1 instead, which a client must accept)."""
        if self.is_ssl() or self.headers is None or self._get_upgrade() != b"h2c":
            return None
        settings = None
        for name, value in self.headers:
            if name == b"http2-settings":
                settings = value
            elif name == b"transfer-encoding" or (name == b"content-length" and value != b"0"):
                return None
        return settings

    def _should_upgrade(self) -> bool:
        if self._h2c_settings() is not None:
            return True
        return bool(super()._should_upgrade())

    def handle_websocket_upgrade(self, event: h11.Request) -> None:
        settings = self._h2c_settings()
        if settings is None:
            super().handle_websocket_upgrade(event)
            return
        self.transport.write(
            b"HTTP/1.1 101 Switching Protocols\r\nconnection: Upgrade\r\nupgrade: h2c\r\n\r\n"
        )
        rest, _ = self.conn.trailing_data
        scope = {**self.scope, "http_version": "2"}
        self._hand_off(bytes(rest), upgrade=(settings, scope))

    def _hand_off(self, data: bytes, upgrade: tuple[bytes, Any] | None = None) -> None:
        """Gives this connection to the HTTP/2 protocol, with what it read."""
        self._cancel_deadline()
        self._first = None
        self.connections.discard(self)
        protocol = H2Protocol(
            self.app,
            limits=self.limits,
            connections=self.connections,
            tasks=self.tasks,
            app_state=self.app_state,
            root_path=self.root_path,
            default_headers=self.server_state.default_headers,
            loop=self.loop,
        )
        protocol.take_over(
            self.transport,
            server=self.server,
            client=self.client,
            scheme=self.scheme or "http",
            data=data,
            upgrade=upgrade,
        )

    def close_if_idle(self) -> bool:
        """Closes this connection if it waits between requests (the cap)."""
        if not self._idle:
            return False
        self._idle = False
        self._close_with(b"")
        return True

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
            self._received = False
            self._idle = True
            self._arm(self.limits.idle_timeout, self._headers_overdue)

    def _await_headers(self) -> None:
        self._received = False
        self._arm(self.limits.header_timeout, self._headers_overdue)

    def _reclaim_idle(self) -> bool:
        """Closes one idle keep-alive connection to make room; False if none is."""
        for other in list(self.connections):
            close_if_idle = getattr(other, "close_if_idle", None)
            if other is not self and close_if_idle is not None and close_if_idle():
                return True
        return False

    def _arm(self, seconds: float, callback: Any) -> None:
        self._cancel_deadline()
        self._deadline = self.loop.call_later(seconds, callback)

    def _cancel_deadline(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _headers_overdue(self) -> None:
        self._deadline = None
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return
        # A keep-alive connection that sent nothing is simply done; one that
        # sent part of a header is told why.
        self._close_with(HEADER_TIMEOUT if self._received else b"")

    def _body_overdue(self) -> None:
        self._deadline = None
        if self.transport.is_closing() or self.conn.their_state is not h11.SEND_BODY:
            return
        if self.flow.read_paused:  # the app has not read what came: not the client's stall
            self._arm(self.limits.body_timeout, self._body_overdue)
            return
        if self.cycle is not None and not self.cycle.response_started:
            self._close_with(BODY_TIMEOUT)
        else:
            self.transport.close()
        if self.cycle is not None:
            self.cycle.disconnected = True
            self.cycle.message_event.set()

    def _close_with(self, answer: bytes) -> None:
        self._cancel_deadline()
        if answer:
            self.transport.write(answer)
        self.transport.close()
