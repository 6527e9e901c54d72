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
from dataclasses import dataclass
from typing import Any

import h11
from uvicorn.config import Config
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.server import ServerState

log = logging.getLogger(__name__)

DEFAULT_HEADER_TIMEOUT = 20.0
DEFAULT_BODY_TIMEOUT = 60.0
# Whole seconds, as uvicorn takes it: past Chromium's 300 s for a used socket.
DEFAULT_IDLE_TIMEOUT = 310
DEFAULT_MAX_CONNECTIONS = 1000


@dataclass(frozen=True)
class HttpLimits:
    header_timeout: float = DEFAULT_HEADER_TIMEOUT
    body_timeout: float = DEFAULT_BODY_TIMEOUT
    idle_timeout: int = DEFAULT_IDLE_TIMEOUT
    max_connections: int = DEFAULT_MAX_CONNECTIONS

    @property
    def accept_batch(self) -> int:
        """The listen backlog, which is also how many connections asyncio
        accepts in one go before any of them is counted: each holds a
        descriptor until the cap closes it, so it is kept small."""
        return max(8, min(128, self.max_connections // 8))

    @property
    def descriptors(self) -> int:
        """The most descriptors the listener's connections hold at once."""
        return self.max_connections + self.accept_batch


def _answer(status: int, reason: str, code: str, message: str) -> bytes:
    body = f'{{"error":{{"code":"{code}","message":"{message}"}}}}'.encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


TOO_MANY = _answer(
    503, "Service Unavailable", "too_many_connections", "this listener holds its maximum"
)
HEADER_TIMEOUT = _answer(
    408, "Request Timeout", "request_timeout", "the request headers did not arrive in time"
)
BODY_TIMEOUT = _answer(
    408, "Request Timeout", "request_timeout", "the request body stopped arriving"
)


class LimitedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with the deadlines and the cap of ``HttpLimits``."""

    limits = HttpLimits()

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
        self._await_headers()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_deadline()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
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
        for other in self.connections:
            if isinstance(other, LimitedH11Protocol) and other is not self and other._idle:
                other._idle = False
                other._close_with(b"")
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
