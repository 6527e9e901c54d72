"""HTTP/2 on the HTTP port, on the ``h2`` state machine, driving the same ASGI
app as uvicorn's HTTP/1.1.

uvicorn speaks HTTP/1.1 (h11); ``connections.LimitedH11Protocol`` hands a
connection to ``H2Protocol`` when it starts with the HTTP/2 preface (h2c
with prior knowledge), asks ``Upgrade: h2c`` on a request without a body,
or chose ``h2`` in the TLS handshake (ALPN). Measured against Hypercorn and
uvicorn's own HTTP/2 (zttp) in benchmarks/http2.py; why this one is in
docs/deployment.md ("HTTP/2 and TLS").

The listener's limits hold here too (``HttpLimits``):

* **header timeout**: from the hand-off until the first request's headers
  are complete, and, on a connection with no open stream, from the first
  byte of a frame that is not complete yet. Then GOAWAY and close.
* **body timeout**: per stream, between two DATA frames the app waits for
  (data it has not read yet does not count). 408 if no answer has started,
  else the stream is reset.
* **idle timeout**: a connection with no open stream; GOAWAY and close.
* **max connections**: the connection stays in the listener's count (it
  takes the place of the HTTP/1.1 protocol it came from), and an idle one
  gives its place to a new connection as an idle keep-alive one does.
* **memory**: a stream may have 256 KiB the app has not read, a connection
  1 MiB (flow-control windows granted only as the app reads), at most 100
  streams at once; a header list over 16 KiB (what h11 takes for a request
  head) is 431 on its stream, over 1 MiB a connection error.

``Connection: close`` on a response (the server drains) becomes GOAWAY: the
open streams finish and the client opens its next request elsewhere.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Iterable
from typing import Any
from urllib.parse import unquote

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings
import hyperframe.frame
from starlette.types import ASGIApp, Message, Scope

from omni_grpc.transport.sse.http_limits import BODY_TIMEOUT_BODY, HttpLimits, answer_body

log = logging.getLogger(__name__)

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
STREAM_WINDOW = 256 * 1024
CONNECTION_WINDOW = 1024 * 1024
MAX_STREAMS = 100
# What h11 takes for a request head by default (uvicorn's HTTP/1.1 side).
MAX_HEADER_LIST = 16 * 1024
# Past this the header block is not decoded at all: a connection error.
MAX_DECODED_HEADER_LIST = 1024 * 1024
# Hop-by-hop headers HTTP/2 forbids; the app (or _CloseWhen) may set them.
_CONNECTION_HEADERS = frozenset(
    {b"connection", b"keep-alive", b"proxy-connection", b"transfer-encoding", b"upgrade"}
)
TOO_LARGE_BODY = answer_body(
    "request_header_fields_too_large", "the request headers are larger than 16 KiB"
)


def looks_like_preface(data: bytes) -> bool:
    """Whether a connection's first bytes are (so far) HTTP/2's preface."""
    n = min(len(data), len(PREFACE))
    return n > 0 and data[:n] == PREFACE[:n]


class _Stream:
    def __init__(self, stream_id: int, scope: Scope) -> None:
        self.id = stream_id
        self.scope = scope
        # (bytes, flow-controlled length) the app has not read yet.
        self.chunks: deque[tuple[bytes, int]] = deque()
        self.remote_ended = False
        self.body_done = False  # the app has had more_body False
        self.disconnected = False
        self.response_started = False
        self.response_complete = False
        self.status = 200
        self.headers: list[tuple[bytes, bytes]] = []
        self.wake = asyncio.Event()  # data, end or reset arrived
        self.window = asyncio.Event()  # the send window opened
        self.deadline: asyncio.TimerHandle | None = None
        self.task: asyncio.Task[None] | None = None
        # The response said Connection: close: GOAWAY once it is sent (not
        # before its HEADERS: some clients, h2's own, drop frames after GOAWAY).
        self.close_after = False

    def cancel_deadline(self) -> None:
        if self.deadline is not None:
            self.deadline.cancel()
            self.deadline = None


class H2Protocol(asyncio.Protocol):
    """One HTTP/2 connection, handed over by the HTTP/1.1 protocol."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        limits: HttpLimits,
        connections: set[Any],
        tasks: set[asyncio.Task[None]],
        app_state: dict[str, Any],
        root_path: str = "",
        default_headers: Iterable[tuple[bytes, bytes]] = (),
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.app = app
        self.limits = limits
        self.connections = connections
        self.tasks = tasks
        self.app_state = app_state
        self.root_path = root_path
        self.default_headers = list(default_headers)
        self.loop = loop
        self.conn = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=False, header_encoding=None)
        )
        self.conn.local_settings = h2.settings.Settings(
            client=False,
            initial_values={
                h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS: MAX_STREAMS,
                h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: STREAM_WINDOW,
                h2.settings.SettingCodes.ENABLE_PUSH: 0,
            },
        )
        self.conn.decoder.max_header_list_size = MAX_DECODED_HEADER_LIST
        self.streams: dict[int, _Stream] = {}
        self.transport: asyncio.Transport = None  # type: ignore[assignment]
        self.server: tuple[str, int | None] | None = None
        self.client: tuple[str, int] | None = None
        self.scheme = "http"
        self._deadline: asyncio.TimerHandle | None = None
        self._deadline_kind = ""
        self._seen_request = False
        self._closing = False  # GOAWAY sent: finish the open streams, then close
        self._writable = asyncio.Event()
        self._writable.set()

    # -- the hand-off -------------------------------------------------------

    def take_over(
        self,
        transport: asyncio.Transport,
        *,
        server: tuple[str, int | None] | None,
        client: tuple[str, int] | None,
        scheme: str,
        data: bytes = b"",
        upgrade: tuple[bytes, Scope] | None = None,
    ) -> None:
        """Starts on ``transport`` (already open): ``data`` is what came after
        the hand-off point; ``upgrade`` the HTTP2-Settings header and the scope
        of the request that asked ``Upgrade: h2c`` (it becomes stream 1)."""
        self.transport = transport
        self.server, self.client, self.scheme = server, client, scheme
        self.connections.add(self)
        transport.set_protocol(self)
        if upgrade is not None:
            settings, scope = upgrade
            self.conn.initiate_upgrade_connection(settings)
            self._grant_connection_window()
            self._open_stream(1, scope, remote_ended=True)
        else:
            self.conn.initiate_connection()
            self._grant_connection_window()
            self._arm(self.limits.header_timeout, "header")
        self._flush()
        if data:
            self.data_received(data)

    def _grant_connection_window(self) -> None:
        grow = CONNECTION_WINDOW - self.conn.inbound_flow_control_window
        if grow > 0:
            self.conn.increment_flow_control_window(grow)

    # -- asyncio.Protocol -----------------------------------------------------

    def connection_lost(self, exc: Exception | None) -> None:
        self.connections.discard(self)
        self._cancel_deadline()
        self._writable.set()
        for stream in self.streams.values():
            self._disconnect(stream)

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    def eof_received(self) -> bool | None:
        return None

    def data_received(self, data: bytes) -> None:
        try:
            events = self.conn.receive_data(data)
        except h2.exceptions.ProtocolError as exc:
            # h2 has queued its GOAWAY: send it and end the connection.
            log.info("HTTP/2 connection error: %s", exc)
            self._flush()
            self._cancel_deadline()
            self.transport.close()
            return
        for event in events:
            self._handle(event)
        self._flush()
        idle = not self.streams and not self.transport.is_closing()
        if idle and self._partial_frame() and self._deadline_kind != "header":
            self._arm(self.limits.header_timeout, "header")

    def _partial_frame(self) -> bool:
        buffer = self.conn.incoming_buffer
        # h2 keeps both private: a frame cut short, a header block without its end.
        return bool(getattr(buffer, "_data", b"")) or bool(getattr(buffer, "_headers_buffer", None))

    # -- events ---------------------------------------------------------------

    def _handle(self, event: h2.events.Event) -> None:
        if isinstance(event, h2.events.RequestReceived):
            assert event.stream_id is not None and event.headers is not None
            self._request(event.stream_id, event.headers, event.stream_ended is not None)
        elif isinstance(event, h2.events.DataReceived):
            assert event.stream_id is not None
            stream = self.streams.get(event.stream_id)
            length = event.flow_controlled_length or 0
            if stream is None or stream.body_done or stream.disconnected:
                # Nobody will read it: give the window back at once.
                self._acknowledge(event.stream_id, length)
                return
            stream.chunks.append((event.data or b"", length))
            stream.wake.set()
            if event.stream_ended is None:
                self._arm_body(stream)
        elif isinstance(event, h2.events.StreamEnded):
            stream = self.streams.get(event.stream_id or 0)
            if stream is not None:
                stream.remote_ended = True
                stream.cancel_deadline()
                stream.wake.set()
                self._maybe_finished(stream)
        elif isinstance(event, h2.events.StreamReset):
            stream = self.streams.get(event.stream_id or 0)
            if stream is not None:
                stream.remote_ended = True
                self._disconnect(stream)
                self._maybe_finished(stream)
        elif isinstance(event, h2.events.WindowUpdated):
            if not event.stream_id:
                for stream in self.streams.values():
                    stream.window.set()
            elif (stream := self.streams.get(event.stream_id)) is not None:
                stream.window.set()
        elif isinstance(event, h2.events.RemoteSettingsChanged):
            for stream in self.streams.values():
                stream.window.set()
        elif isinstance(event, h2.events.ConnectionTerminated):
            self._closing = True
            for stream in self.streams.values():
                self._disconnect(stream)
            self._close_if_done()

    def _request(self, stream_id: int, headers: list[tuple[bytes, bytes]], ended: bool) -> None:
        self._seen_request = True
        if self._deadline_kind in ("header", "idle"):
            self._cancel_deadline()
        size = sum(len(name) + len(value) + 32 for name, value in headers)
        method = path = b""
        authority = None
        plain: list[tuple[bytes, bytes]] = []
        cookies: list[bytes] = []
        for name, value in headers:
            if name == b":method":
                method = value
            elif name == b":path":
                path = value
            elif name == b":authority":
                authority = value
            elif name == b"cookie":
                cookies.append(value)
            elif not name.startswith(b":"):
                plain.append((name, value))
        if cookies:
            # HTTP/2 may split Cookie into one field per crumb; the apps read
            # one header, as HTTP/1.1 sends it (RFC 9113, 8.2.3).
            plain.append((b"cookie", b"; ".join(cookies)))
        if authority is not None and not any(name == b"host" for name, _ in plain):
            # The apps (and their Host checks) read Host, as HTTP/1.1 sends it.
            plain.insert(0, (b"host", authority))
        raw_path, _, query = path.partition(b"?")
        scope: Scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "2",
            "server": self.server,
            "client": self.client,
            "scheme": self.scheme,
            "method": method.decode("ascii", "replace"),
            "root_path": self.root_path,
            "path": self.root_path + unquote(raw_path.decode("ascii", "replace")),
            "raw_path": self.root_path.encode("ascii") + raw_path,
            "query_string": query,
            "headers": plain,
            "state": self.app_state.copy(),
        }
        stream = self._open_stream(stream_id, scope, remote_ended=ended, run=False)
        # h2 counts only streams still open on the wire; a client that opens
        # and resets streams at once (HTTP/2 "rapid reset") would start an app
        # task for each while earlier ones are still finishing. Streams whose
        # app has not returned count too, so a connection runs at most
        # MAX_STREAMS at once.
        running = len(self.streams) > MAX_STREAMS
        if self._closing or running:  # the client retries it (elsewhere, after GOAWAY)
            self._reset(stream, h2.errors.ErrorCodes.REFUSED_STREAM)
            self._maybe_finished(stream)
            return
        if size > MAX_HEADER_LIST:
            self._refuse(stream, 431, TOO_LARGE_BODY)
            return
        self._run(stream)

    def _open_stream(
        self, stream_id: int, scope: Scope, *, remote_ended: bool, run: bool = True
    ) -> _Stream:
        if self._deadline_kind in ("header", "idle"):
            self._cancel_deadline()
        self._seen_request = True
        stream = _Stream(stream_id, scope)
        stream.remote_ended = remote_ended
        self.streams[stream_id] = stream
        if not remote_ended:
            self._arm_body(stream)
        if run:
            self._run(stream)
        return stream

    def _run(self, stream: _Stream) -> None:
        task = self.loop.create_task(self._run_asgi(stream))
        stream.task = task
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def _refuse(self, stream: _Stream, status: int, body: bytes) -> None:
        """Answers ``status`` with a JSON ``body`` without the app, and stops
        the request's upload."""
        stream.response_started = stream.response_complete = True
        stream.body_done = True
        stream.cancel_deadline()
        try:
            self.conn.send_headers(
                stream.id,
                [
                    (b":status", str(status).encode()),
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                ],
            )
            self.conn.send_data(stream.id, body, end_stream=True)
            if not stream.remote_ended:
                self.conn.reset_stream(stream.id, h2.errors.ErrorCodes.NO_ERROR)
                stream.remote_ended = True
        except (h2.exceptions.ProtocolError, h2.exceptions.FlowControlError):
            self._reset(stream)
        self._flush()
        self._disconnect(stream)
        self._maybe_finished(stream)

    # -- the ASGI side --------------------------------------------------------

    async def _run_asgi(self, stream: _Stream) -> None:
        async def receive() -> Message:
            return await self._receive(stream)

        async def send(message: Message) -> None:
            await self._send(stream, message)

        try:
            await self.app(stream.scope, receive, send)
        except BaseException as exc:
            if not isinstance(exc, asyncio.CancelledError):
                log.error("Exception in ASGI application (HTTP/2)", exc_info=exc)
            if not stream.response_started and not stream.disconnected:
                self._refuse(stream, 500, answer_body("internal", "internal server error"))
            elif not stream.response_complete:
                self._reset(stream, h2.errors.ErrorCodes.INTERNAL_ERROR)
            if isinstance(exc, asyncio.CancelledError):
                raise
            return
        finally:
            stream.task = None
            if not stream.remote_ended and not stream.disconnected:
                # The app answered without reading the whole body: stop the upload.
                self._reset(stream, h2.errors.ErrorCodes.NO_ERROR)
            self._maybe_finished(stream)
        if not stream.response_complete and not stream.disconnected:
            if not stream.response_started:
                self._refuse(stream, 500, answer_body("internal", "internal server error"))
            else:
                self._reset(stream, h2.errors.ErrorCodes.INTERNAL_ERROR)
            self._maybe_finished(stream)

    async def _receive(self, stream: _Stream) -> Message:
        while True:
            if stream.chunks and not stream.body_done:
                parts = []
                length = 0
                while stream.chunks:
                    data, counted = stream.chunks.popleft()
                    parts.append(data)
                    length += counted
                self._acknowledge(stream.id, length)
                more = not stream.remote_ended
                stream.body_done = not more
                return {"type": "http.request", "body": b"".join(parts), "more_body": more}
            if stream.disconnected or stream.response_complete:
                return {"type": "http.disconnect"}
            if stream.remote_ended and not stream.body_done:
                stream.body_done = True
                return {"type": "http.request", "body": b"", "more_body": False}
            stream.wake.clear()
            await stream.wake.wait()

    async def _send(self, stream: _Stream, message: Message) -> None:
        if stream.disconnected or self.transport.is_closing():
            return
        kind = message["type"]
        if kind == "http.response.start":
            if stream.response_started:
                raise RuntimeError("http.response.start sent twice")
            stream.response_started = True
            stream.status = int(message["status"])
            headers = [(b":status", str(stream.status).encode())]
            for name, value in [*self.default_headers, *message.get("headers", [])]:
                name = bytes(name).lower()
                if name in _CONNECTION_HEADERS:
                    if name == b"connection" and b"close" in bytes(value).lower():
                        stream.close_after = True
                    continue
                headers.append((name, bytes(value)))
            stream.headers = headers
            return
        if kind != "http.response.body":
            return
        if not stream.response_started:
            raise RuntimeError("http.response.body before http.response.start")
        if stream.response_complete:
            return
        body = bytes(message.get("body", b""))
        more = bool(message.get("more_body", False))
        if stream.headers:
            headers, stream.headers = stream.headers, []
            try:
                self.conn.send_headers(stream.id, headers, end_stream=not body and not more)
            except h2.exceptions.StreamClosedError:
                self._disconnect(stream)
                return
            self._flush()
            if not body and not more:
                self._complete(stream)
                return
        await self._send_data(stream, body, end=not more)
        if not more:
            self._complete(stream)

    async def _send_data(self, stream: _Stream, body: bytes, *, end: bool) -> None:
        view = memoryview(body)
        while True:
            if stream.disconnected or self.transport.is_closing():
                return
            if not view:
                if end:
                    try:
                        self.conn.end_stream(stream.id)
                    except h2.exceptions.StreamClosedError:
                        self._disconnect(stream)
                    self._flush()
                return
            try:
                window = self.conn.local_flow_control_window(stream.id)
            except h2.exceptions.StreamClosedError:
                self._disconnect(stream)
                return
            size = min(window, self.conn.max_outbound_frame_size, len(view))
            if size <= 0:
                stream.window.clear()
                await stream.window.wait()
                continue
            last = end and size == len(view)
            try:
                self.conn.send_data(stream.id, bytes(view[:size]), end_stream=last)
            except h2.exceptions.StreamClosedError:
                self._disconnect(stream)
                return
            self._flush()
            view = view[size:]
            if last:
                return
            await self._writable.wait()

    def _complete(self, stream: _Stream) -> None:
        stream.response_complete = True
        stream.wake.set()
        if stream.close_after:
            self._go_away()
        self._maybe_finished(stream)

    # -- flow control, resets, the end of streams and of the connection ------

    def _acknowledge(self, stream_id: int, length: int) -> None:
        if length <= 0 or self.transport.is_closing():
            return
        try:
            self.conn.acknowledge_received_data(length, stream_id)
        except h2.exceptions.ProtocolError:
            return  # the stream is gone; h2 credits the connection window itself
        self._flush()

    def _reset(
        self, stream: _Stream, code: h2.errors.ErrorCodes = h2.errors.ErrorCodes.CANCEL
    ) -> None:
        if not self.transport.is_closing():
            with contextlib.suppress(h2.exceptions.ProtocolError):
                self.conn.reset_stream(stream.id, code)
            self._flush()
        stream.remote_ended = True
        self._disconnect(stream)

    def _disconnect(self, stream: _Stream) -> None:
        stream.disconnected = True
        stream.cancel_deadline()
        stream.wake.set()
        stream.window.set()

    def _maybe_finished(self, stream: _Stream) -> None:
        """Forgets a stream once both its sides are done and its app returned."""
        done_here = stream.response_complete or stream.disconnected
        if stream.task is not None or not done_here or not stream.remote_ended:
            return
        stream.cancel_deadline()
        # Data the app never read is the connection's window: give it back.
        unread = sum(length for _, length in stream.chunks)
        stream.chunks.clear()
        if unread:
            with contextlib.suppress(h2.exceptions.ProtocolError):
                self.conn.acknowledge_received_data(unread, stream.id)
        self.streams.pop(stream.id, None)
        if not self.streams:
            if self._closing:
                self._close_if_done()
            elif not self.transport.is_closing():
                self._arm(self.limits.idle_timeout, "idle")

    def _go_away(self) -> None:
        """Tells the client to open no more streams here; the open ones finish.

        h2's ``close_connection`` sends GOAWAY but then refuses every frame
        after it, so the open streams could not finish: the frame is written
        here beside its state machine, which stays open for them."""
        if self._closing or self.transport.is_closing():
            return
        self._closing = True
        self._flush()
        frame = hyperframe.frame.GoAwayFrame(0)
        frame.last_stream_id = self.conn.highest_inbound_stream_id
        frame.error_code = h2.errors.ErrorCodes.NO_ERROR
        self.transport.write(frame.serialize())

    def _close_if_done(self) -> None:
        if not self.streams and not self.transport.is_closing():
            with contextlib.suppress(h2.exceptions.ProtocolError):
                self.conn.close_connection(last_stream_id=self.conn.highest_inbound_stream_id)
            self._flush()
            self._cancel_deadline()
            self.transport.close()

    def close_if_idle(self) -> bool:
        """Gives the place of an idle connection to a new one (the cap)."""
        # Idle: no open stream and no request begun since the last one ended
        # (SETTINGS, PING or WINDOW_UPDATE frames do not make it busy).
        if self._deadline_kind != "idle" or self.streams or self.transport.is_closing():
            return False
        self._go_away()
        self._close_if_done()
        return True

    def shutdown(self) -> None:
        """uvicorn's graceful shutdown: GOAWAY, finish the open streams, close."""
        self._go_away()
        self._close_if_done()

    def _flush(self) -> None:
        data = self.conn.data_to_send()
        if data and not self.transport.is_closing():
            self.transport.write(data)

    # -- deadlines ------------------------------------------------------------

    def _arm(self, seconds: float, kind: str) -> None:
        self._cancel_deadline()
        self._deadline_kind = kind
        self._deadline = self.loop.call_later(seconds, self._overdue)

    def _cancel_deadline(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        self._deadline = None
        self._deadline_kind = ""

    def _overdue(self) -> None:
        self._deadline = None
        self._deadline_kind = ""
        if self.streams or self.transport.is_closing():
            return
        self._go_away()
        self._close_if_done()

    def _arm_body(self, stream: _Stream) -> None:
        stream.cancel_deadline()
        stream.deadline = self.loop.call_later(self.limits.body_timeout, self._body_overdue, stream)

    def _body_overdue(self, stream: _Stream) -> None:
        stream.deadline = None
        if stream.remote_ended or stream.disconnected or self.transport.is_closing():
            return
        if stream.chunks:  # the app has not read what came: not the client's stall
            self._arm_body(stream)
            return
        if not stream.response_started:
            self._refuse(stream, 408, BODY_TIMEOUT_BODY)
        else:
            self._reset(stream)
        self._maybe_finished(stream)
