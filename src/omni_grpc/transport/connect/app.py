"""AgentService over Connect and gRPC-Web, as an ASGI app for the HTTP port.

Every method is served at ``/omni.v1.AgentService/<Method>`` over HTTP/1.1 or
HTTP/2, from the runtime's calls (``runtime.agent_service``), so the rules
are gRPC's: the bearer token, the Host and Origin checks
(``transport/http_checks.py``), the operator's policy and limits (the
runtime's), the same codes with the same details, resume with
``after_event_id``, and a Run whose client goes away (or whose deadline
passes) is aborted unless it asked to detach.

What a request may carry: ``connect-timeout-ms`` or ``grpc-timeout`` (the
call's deadline), ``connect-protocol-version: 1``; messages up to
``max_message_bytes``, uncompressed or gzip (``inflate.py``: one whole
member, refused before inflating when it declares more than the limit).
Another compression is refused ``unimplemented`` whether or not a message
uses it, and every answer names what is read (``accept-encoding``,
``connect-accept-encoding``, ``grpc-accept-encoding``), as connect-go does.

Liveness: what one request sends holds the event loop up for as little as
it can. Bodies are read, base64-decoded and split into envelopes as they
arrive; a large gzip message is inflated in a worker thread (zlib lets go of
the GIL), ``INFLATING`` at once; a large JSON message is decoded in one turn
per pass. What is left in one turn is one pass over one message (protobuf's
parse, the JSON parser), bounded by the message limit
(benchmarks/loop_stall.py).
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import anyio
import anyio.lowlevel
import anyio.to_thread
import orjson
from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message
from google.rpc import code_pb2
from starlette.middleware.cors import CORSMiddleware
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from omni_grpc.message_size import GRPC_MAX_MESSAGE_BYTES
from omni_grpc.runtime.agent_service import AgentCalls, AttachCall, RunCall, response_bytes
from omni_grpc.runtime.errors import HubError, Unauthenticated
from omni_grpc.runtime.interface import ANONYMOUS, BearerCheck, CallContext, HubEvent, Runtime
from omni_grpc.transport import large_json
from omni_grpc.transport.connect import protojson
from omni_grpc.transport.connect.envelope import (
    COMPRESSED,
    HEADER_SIZE,
    Base64Runs,
    Envelope,
    EnvelopeError,
    EnvelopeTooLarge,
    MessageCount,
    SingleMessage,
)
from omni_grpc.transport.connect.errors import INTERNAL_MESSAGE, CallError
from omni_grpc.transport.connect.inflate import InflateError, TooLarge, inflate_gzip
from omni_grpc.transport.connect.protocols import (
    ACCEPTED,
    Codec,
    Protocol,
    Unsupported,
    Wire,
    negotiate,
)
from omni_grpc.transport.http_call import until_disconnect
from omni_grpc.transport.http_checks import (
    LOOPBACK_NAMES,
    STATE_CHANGING,
    Ambiguous,
    HostOriginPolicy,
    single_headers,
)
from omni_grpc.vocabulary import AUTHORIZATION_HEADER, SESSION_HEADER
from omni_grpc_proto.omni.v1 import agent_service_pb2 as pb

log = logging.getLogger(__name__)

SERVICE = pb.DESCRIPTOR.services_by_name["AgentService"].full_name
PREFIX = f"/{SERVICE}/"
# As gRPC's (omni_grpc.message_size): a message at the record limit fits.
DEFAULT_MAX_MESSAGE_BYTES = GRPC_MAX_MESSAGE_BYTES

# What a browser may send and read (CORS), beyond the simple headers.
CORS_ALLOW_HEADERS = [
    AUTHORIZATION_HEADER,
    "Content-Type",
    "Connect-Protocol-Version",
    "Connect-Timeout-Ms",
    "Content-Encoding",
    "Connect-Content-Encoding",
    "Connect-Accept-Encoding",
    "Grpc-Encoding",
    "Grpc-Accept-Encoding",
    "Grpc-Timeout",
    "X-Grpc-Web",
    "X-User-Agent",
    "Traceparent",
    "Tracestate",
]
CORS_EXPOSE_HEADERS = [
    "Grpc-Status",
    "Grpc-Message",
    "Grpc-Status-Details-Bin",
    "Connect-Protocol-Version",
    "Connect-Accept-Encoding",
    "Grpc-Accept-Encoding",
    SESSION_HEADER,
]

# The request compressions read here, as the accept-encoding headers name them
# (identity is always read and, as in connect-go, not listed).
COMPRESSIONS = ("gzip",)
READABLE = ("identity", *COMPRESSIONS)
# A gzip message this small is inflated on the loop (microseconds); larger
# ones in a worker thread, one at a time: each holds up to the message limit
# in memory while it inflates, so bombs that lie about their size cost one
# limit's worth, not one per request (measured: benchmarks/loop_stall.py).
INLINE_INFLATE_BYTES = 64 * 1024
INFLATING = 1

_Req = TypeVar("_Req", bound=Message)
_T = TypeVar("_T")


@dataclass(frozen=True)
class Method:
    name: str
    request_type: type[Message]
    streaming: bool


METHODS = {
    f"{PREFIX}{m.name}": m
    for m in (
        Method("Run", pb.RunRequest, True),
        Method("Attach", pb.AttachRequest, True),
        Method("GetHistory", pb.GetHistoryRequest, True),
        Method("Approve", pb.ApproveRequest, False),
        Method("Abort", pb.AbortRequest, False),
        Method("ListSessions", pb.ListSessionsRequest, False),
        Method("DeleteSession", pb.DeleteSessionRequest, False),
    )
}


@dataclass
class ConnectConfig:
    # The same token gRPC requires; None serves without auth.
    auth_token: str | None = None
    # Browser origins allowed to call (CORS); ``*`` for any.
    cors_origins: Sequence[str] = field(default_factory=tuple)
    # Host names answered (``http_checks.default_hosts`` for the bound address).
    allowed_hosts: Sequence[str] = LOOPBACK_NAMES
    # The largest request message (gRPC's --max-message-bytes).
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES


class CallFailed(Exception):
    """A request refused before the runtime was called."""

    def __init__(self, error: CallError) -> None:
        super().__init__(error.message)
        self.error = error


def _fail(code: int, message: str) -> CallFailed:
    return CallFailed(CallError(code, message))


class ConnectApp:
    """The ASGI app serving AgentService over Connect and gRPC-Web."""

    def __init__(self, hub: Runtime, config: ConnectConfig) -> None:
        self.calls = AgentCalls(hub)
        self.config = config
        self.policy = HostOriginPolicy(
            allowed_hosts=config.allowed_hosts, allowed_origins=config.cors_origins
        )
        # The one token check (the runtime's), as gRPC's and the HTTP routes'.
        self._auth = BearerCheck(config.auth_token) if config.auth_token else None
        self._inflating: anyio.CapacityLimiter | None = None  # made on the loop, when first needed
        self._inner: ASGIApp = self._serve
        if config.cors_origins:
            self._inner = CORSMiddleware(
                self._serve,
                allow_origins=list(config.cors_origins),
                allow_methods=["POST"],
                allow_headers=CORS_ALLOW_HEADERS,
                expose_headers=CORS_EXPOSE_HEADERS,
                max_age=7200,
            )

    def routes(self) -> list[BaseRoute]:
        """A route per method (for telemetry's templates)."""
        return [Route(path, self, methods=["POST"]) for path in METHODS]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        try:
            headers = single_headers(scope.get("headers", ()))
        except Ambiguous as exc:
            error = CallError(code_pb2.INVALID_ARGUMENT, str(exc))
            await _refuse(_wire_guess(scope, {}), error, send)
            return
        host = headers.get("host", "")
        if not self.policy.host_allowed(host):
            # Before CORS: a rebound name gets nothing, not even a preflight.
            error = _fail(
                code_pb2.PERMISSION_DENIED, f"Host {host!r} is not a name this server answers to"
            ).error
            await _refuse(_wire_guess(scope, headers), error, send)
            return
        scope.setdefault("state", {})["omni.headers"] = headers
        await self._inner(scope, receive, send)

    async def _serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers: dict[str, str] = scope["state"]["omni.headers"]
        path = scope.get("path", "")[len(scope.get("root_path", "")) :]
        method = METHODS.get(path)
        if method is None:
            error = CallError(code_pb2.UNIMPLEMENTED, f"no method {path!r} in {SERVICE}")
            await _plain(send, 404, error.connect_body(), "application/json")
            return
        if scope["method"] != "POST":
            error = CallError(code_pb2.UNIMPLEMENTED, f"{path} takes POST only")
            await _plain(
                send, 405, error.connect_body(), "application/json", extra=[(b"allow", b"POST")]
            )
            return
        try:
            wire = negotiate(headers.get("content-type", ""), streaming=method.streaming)
        except Unsupported as exc:
            error = CallError(code_pb2.UNIMPLEMENTED, str(exc))
            await _plain(
                send,
                415,
                error.connect_body(),
                "application/json",
                extra=[(b"accept-post", ACCEPTED.encode())],
            )
            return
        try:
            who = self._check(scope["method"], headers, wire)
            timeout = _deadline(headers, wire)
            request = await self._request(receive, _encoding(headers, wire), wire, method)
        except CallFailed as exc:
            await _refuse(wire, exc.error, send)
            return
        deadline = None if timeout is None else anyio.current_time() + timeout
        # What the runtime learns of the call: never the token itself.
        metadata = {k: v for k, v in headers.items() if k != "authorization"}
        context = CallContext.with_timeout(timeout, who=who, metadata=metadata)
        if method.streaming:
            await self._stream(method, request, wire, deadline, context, receive, send)
        else:
            await self._unary(method, request, wire, deadline, send)

    # ---- checks ------------------------------------------------------------------

    def _check(self, http_method: str, headers: dict[str, str], wire: Wire) -> str:
        """The caller (``call_context``'s ``who``), once every check passed."""
        origin = headers.get("origin")
        host = headers.get("host", "")
        if (
            http_method in STATE_CHANGING
            and origin is not None
            and not self.policy.origin_allowed(origin, host)
        ):
            raise _fail(code_pb2.PERMISSION_DENIED, f"Origin {origin!r} may not call here")
        if wire.protocol is Protocol.CONNECT:
            version = headers.get("connect-protocol-version")
            if version is not None and version != "1":
                raise _fail(
                    code_pb2.INVALID_ARGUMENT,
                    f"connect-protocol-version {version!r}: this server speaks version 1",
                )
        who = ANONYMOUS
        if self._auth is not None:
            try:
                who = self._auth.check(BearerCheck.credentials(headers.get("authorization")))
            except Unauthenticated as exc:
                raise CallFailed(CallError.of(exc)) from None
        encoding = _encoding(headers, wire)
        if encoding not in READABLE:
            # Refused whether or not a message is compressed, as connect-go
            # does: the client learns now, not on its first large message.
            raise _fail(
                code_pb2.UNIMPLEMENTED,
                f"the request is compressed with {encoding!r}; this server reads "
                f"{', '.join(READABLE)}",
            )
        return who

    async def _request(
        self, receive: Receive, encoding: str, wire: Wire, method: Method
    ) -> Message:
        limit = self.config.max_message_bytes
        if wire.enveloped:
            envelope = await _read_envelope(receive, wire, limit)
            body, compressed = envelope.data, bool(envelope.flags & COMPRESSED)
            if compressed and encoding == "identity":
                # connect-go's and the conformance suite's code: the peer
                # broke the protocol, not just sent a bad argument.
                raise _fail(
                    code_pb2.INTERNAL,
                    "the request message is flagged compressed, but the request names "
                    f"no compression ({_encoding_header(wire)}: identity)",
                )
        else:
            body = await _read_body(receive, limit, limit)
            compressed = encoding != "identity"
        if compressed:
            body = await self._inflated(body, limit)
        if len(body) >= LARGE_MESSAGE_BYTES:
            await anyio.lowlevel.checkpoint()  # the read (and join) was one turn
        return await _decode(body, method.request_type, wire.codec)

    async def _inflated(self, body: bytes, limit: int) -> bytes:
        """``body`` (gzip) inflated: a small one here, a large one in a worker
        thread, so the loop goes on serving others meanwhile."""
        try:
            if len(body) <= INLINE_INFLATE_BYTES and declared_small(body):
                return inflate_gzip(body, limit)
            if self._inflating is None:
                self._inflating = anyio.CapacityLimiter(INFLATING)
            return await anyio.to_thread.run_sync(
                inflate_gzip, body, limit, limiter=self._inflating
            )
        except TooLarge as exc:
            raise _fail(code_pb2.RESOURCE_EXHAUSTED, f"{_too_large(limit)} ({exc})") from None
        except InflateError as exc:
            raise _fail(code_pb2.INVALID_ARGUMENT, str(exc)) from None

    # ---- calls -------------------------------------------------------------------

    async def _unary(
        self, method: Method, request: Message, wire: Wire, deadline: float | None, send: Send
    ) -> None:
        handlers: dict[str, Callable[[Any], Awaitable[Message]]] = {
            "Approve": self.calls.approve,
            "Abort": self.calls.abort,
            "ListSessions": self.calls.list_sessions,
            "DeleteSession": self.calls.delete_session,
        }
        handler = handlers[method.name]
        try:
            response = await _first_answer(handler(request), deadline, method.name)
        except CallFailed as exc:
            await _refuse(wire, exc.error, send)
            return
        body = wire.message(_encoded(response, wire.codec))
        await _start(send, wire, ())
        await send({"type": "http.response.body", "body": body + wire.success_end()})

    async def _stream(
        self,
        method: Method,
        request: Message,
        wire: Wire,
        deadline: float | None,
        context: CallContext,
        receive: Receive,
        send: Send,
    ) -> None:
        try:
            opened = await _first_answer(
                self._open(method, request, wire, context), deadline, method.name
            )
        except CallFailed as exc:
            await _refuse(wire, exc.error, send)
            return
        frames, session_id, close = opened
        extra = [(SESSION_HEADER.encode(), session_id.encode())] if session_id else []
        await _streamed(frames, close, wire, extra, deadline, receive, send, method.name)

    async def _open(
        self, method: Method, request: Message, wire: Wire, context: CallContext
    ) -> tuple[AsyncIterator[bytes], str, Callable[[], Awaitable[None]]]:
        """The call's response bytes, its session id (none for GetHistory)
        and what ends it; refusals raise before anything is sent."""
        if method.name == "GetHistory":
            assert isinstance(request, pb.GetHistoryRequest)
            history = await self.calls.get_history(request)

            async def messages() -> AsyncIterator[bytes]:
                async for response in history:
                    yield _encoded(response, wire.codec)

            async def nothing() -> None:
                await history.aclose()  # type: ignore[attr-defined]

            return messages(), "", nothing
        call: RunCall | AttachCall
        if method.name == "Run":
            assert isinstance(request, pb.RunRequest)
            # The runtime ends the run at the call's deadline, as on gRPC.
            call = await self.calls.run(request, context)
        else:
            assert isinstance(request, pb.AttachRequest)
            call = await self.calls.attach(request)
        with_json = bool(request.include_json)
        return _events(call, wire.codec, with_json), call.session_id, call.close


async def _first_answer(work: Awaitable[_T], deadline: float | None, name: str) -> _T:
    """What the runtime answers before anything is sent; its refusal, a
    deadline that passes or a server bug raise ``CallFailed``."""
    try:
        with _until(deadline):
            return await work
    except TimeoutError:
        raise CallFailed(DEADLINE_PASSED) from None
    except HubError as exc:
        raise CallFailed(CallError.of(exc)) from None
    except Exception:
        log.exception("%s failed", name)
        raise CallFailed(CallError(code_pb2.INTERNAL, INTERNAL_MESSAGE)) from None


async def _events(
    call: RunCall | AttachCall, codec: Codec, with_json: bool
) -> AsyncIterator[bytes]:
    session_id = call.session_id
    async for event in call.events():
        if codec is Codec.PROTO:
            # The bytes gRPC sends: encoded once per event for every subscriber.
            yield response_bytes(event, session_id, with_json=with_json)
        else:
            yield _event_json(event, session_id, with_json)


def _event_json(event: HubEvent, session_id: str, with_json: bool) -> bytes:
    """The response's ProtoJSON (Run's and Attach's are the same), once per event."""

    def make() -> bytes:
        response = pb.RunResponse.FromString(response_bytes(event, session_id, with_json=with_json))
        return _encoded(response, Codec.JSON)

    return event.memo(("connect-json", session_id, with_json), make)


async def _streamed(
    frames: AsyncIterator[bytes],
    close: Callable[[], Awaitable[None]],
    wire: Wire,
    extra: list[tuple[bytes, bytes]],
    deadline: float | None,
    receive: Receive,
    send: Send,
    name: str,
) -> None:
    """Sends a streaming call's messages and its end, racing the client's
    disconnect: a client that leaves, like a deadline that passes, ends the
    call (``close``) at once (``http_call.until_disconnect``, as SSE's)."""

    async def answer() -> None:
        await _start(send, wire, extra)
        try:
            with _until(deadline):
                async for data in frames:
                    body = wire.message(data)
                    await send({"type": "http.response.body", "body": body, "more_body": True})
            end = wire.success_end()
        except TimeoutError:
            end = wire.error_end(DEADLINE_PASSED)
        except HubError as exc:  # a failed run, a deleted session, the log gone
            end = wire.error_end(CallError.of(exc))
        except Exception:
            log.exception("%s failed", name)
            end = wire.error_end(CallError(code_pb2.INTERNAL, INTERNAL_MESSAGE))
        await send({"type": "http.response.body", "body": end, "more_body": False})

    async def ended() -> None:
        with contextlib.suppress(Exception):
            await frames.aclose()  # type: ignore[attr-defined]
        await close()

    await until_disconnect(receive, answer, ended)


# ---- reading -----------------------------------------------------------------------


async def _chunks(receive: Receive, room: int, limit: int) -> AsyncIterator[bytes]:
    """The request body's chunks as they arrive, refused past ``room`` bytes."""
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _fail(code_pb2.CANCELLED, "the client went away before sending its request")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > room:
            raise _fail(code_pb2.RESOURCE_EXHAUSTED, _too_large(limit))
        yield chunk
        if not message.get("more_body", False):
            return


async def _read_body(receive: Receive, room: int, limit: int) -> bytes:
    chunks = [chunk async for chunk in _chunks(receive, room, limit)]
    if sum(map(len, chunks)) < LARGE_MESSAGE_BYTES:
        return b"".join(chunks)
    # bytes.join copies a result of 1 MiB or more without the GIL: in a
    # thread, the copy of a large body holds no other client up.
    return await anyio.to_thread.run_sync(b"".join, chunks)


async def _read_envelope(receive: Receive, wire: Wire, limit: int) -> Envelope:
    """The one enveloped message, decoded and checked chunk by chunk as it
    arrives (``SingleMessage``, ``Base64Runs``): an envelope too large or a
    second one is refused before the rest of the body is read."""
    # Room for the envelope and the start of a second one; base64 takes 4 bytes for every 3.
    room = limit + 2 * HEADER_SIZE
    if wire.text:
        room = (room + 2) // 3 * 4 + 64
    message = SingleMessage(limit)
    runs = Base64Runs() if wire.text else None
    try:
        async for chunk in _chunks(receive, room, limit):
            message.feed(chunk if runs is None else runs.feed(chunk))
        if runs is not None:
            runs.finish()
        return message.finish()
    except EnvelopeTooLarge as exc:
        raise _fail(code_pb2.RESOURCE_EXHAUSTED, f"{_too_large(limit)} ({exc})") from None
    except MessageCount as exc:
        # gRPC's code for a cardinality violation, as connect-go and the
        # conformance suite answer it.
        raise _fail(code_pb2.UNIMPLEMENTED, str(exc)) from None
    except EnvelopeError as exc:
        raise _fail(code_pb2.INVALID_ARGUMENT, str(exc)) from None


def declared_small(body: bytes) -> bool:
    return len(body) >= 4 and int.from_bytes(body[-4:], "little") <= INLINE_INFLATE_BYTES


def _too_large(limit: int) -> str:
    return f"the request message is larger than this server's limit of {limit} bytes"


def _encoding_header(wire: Wire) -> str:
    """The header naming the request's compression, in this wire's protocol."""
    if wire.protocol is Protocol.GRPC_WEB:
        return "grpc-encoding"
    return "connect-content-encoding" if wire.streaming else "content-encoding"


def _accept_encoding_header(wire: Wire) -> bytes:
    """The header naming the compressions read, in this wire's protocol."""
    if wire.protocol is Protocol.GRPC_WEB:
        return b"grpc-accept-encoding"
    return b"connect-accept-encoding" if wire.streaming else b"accept-encoding"


def _encoding(headers: dict[str, str], wire: Wire) -> str:
    name = headers.get(_encoding_header(wire), "identity")
    return name.strip().lower() or "identity"


# A message this large is decoded in several turns of the loop, one per pass
# over its bytes, so one request holds the others up for the longest pass,
# not for all of them.
LARGE_MESSAGE_BYTES = 1 << 20


async def _decode(body: bytes, request_type: type[_Req], codec: Codec) -> _Req:
    request = request_type()
    large = len(body) >= LARGE_MESSAGE_BYTES
    try:
        if codec is Codec.PROTO:
            request.ParseFromString(body)
        else:
            # json_format.Parse without its cost on long strings; unknown
            # fields are ignored, as protobuf's binary form and connect-go's
            # JSON codec ignore them.
            # A large body is decoded and parsed in another process (one
            # parse holds the GIL, transport/large_json.py).
            tree = await large_json.loads(body, protojson.load_bytes)
            if large:
                await anyio.lowlevel.checkpoint()
            protojson.fill(tree, request)
    except (
        DecodeError,
        json_format.ParseError,
        RecursionError,
        UnicodeDecodeError,
        ValueError,
    ) as exc:
        reason = str(exc) or type(exc).__name__
        raise _fail(
            code_pb2.INVALID_ARGUMENT,
            f"the request is not a valid {request_type.DESCRIPTOR.name}: {reason}",
        ) from None
    return request


def _encoded(message: Message, codec: Codec) -> bytes:
    if codec is Codec.PROTO:
        return message.SerializeToString()
    return orjson.dumps(json_format.MessageToDict(message))


# ---- deadlines -----------------------------------------------------------------------

_GRPC_TIMEOUT = re.compile(r"^(\d{1,8})([HMSmun])$")
_UNITS = {"H": 3600.0, "M": 60.0, "S": 1.0, "m": 1e-3, "u": 1e-6, "n": 1e-9}


def _deadline(headers: dict[str, str], wire: Wire) -> float | None:
    """Seconds the call may take, from its protocol's timeout header."""
    if wire.protocol is Protocol.GRPC_WEB:
        value = headers.get("grpc-timeout")
        if value is None:
            return None
        match = _GRPC_TIMEOUT.match(value.strip())
        if match is None:
            raise _fail(code_pb2.INVALID_ARGUMENT, f"grpc-timeout {value!r} is not a timeout")
        return int(match.group(1)) * _UNITS[match.group(2)]
    value = headers.get("connect-timeout-ms")
    if value is None:
        return None
    if not re.fullmatch(r"\d{1,10}", value.strip()):
        raise _fail(code_pb2.INVALID_ARGUMENT, f"connect-timeout-ms {value!r} is not a timeout")
    return int(value) / 1000


DEADLINE_PASSED = CallError(code_pb2.DEADLINE_EXCEEDED, "the call's deadline passed")


@contextlib.contextmanager
def _until(deadline: float | None) -> Iterator[None]:
    """Raises TimeoutError when ``deadline`` (anyio's clock) passes inside."""
    if deadline is None:
        yield
        return
    with anyio.fail_after(max(0.0, deadline - anyio.current_time())):
        yield


# ---- writing -----------------------------------------------------------------------


def _wire_guess(scope: Scope, headers: dict[str, str]) -> Wire:
    """The wire to refuse in before the method is known: the request's own
    if it names one, else Connect unary JSON."""
    method = METHODS.get(scope.get("path", "")[len(scope.get("root_path", "")) :])
    streaming = method.streaming if method is not None else False
    try:
        return negotiate(headers.get("content-type", ""), streaming=streaming)
    except Unsupported:
        return Wire(Protocol.CONNECT, Codec.JSON)


def _accepted(wire: Wire) -> tuple[bytes, bytes]:
    return (_accept_encoding_header(wire), ", ".join(COMPRESSIONS).encode())


async def _start(send: Send, wire: Wire, extra: Sequence[tuple[bytes, bytes]]) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [
                (b"content-type", wire.content_type.encode()),
                _accepted(wire),
                *extra,
            ],
        }
    )


async def _refuse(wire: Wire, error: CallError, send: Send) -> None:
    """A call refused before any message: Connect unary's HTTP status and JSON
    body, Connect streaming's end-of-stream, gRPC-Web's trailers-only answer."""
    if wire.protocol is Protocol.GRPC_WEB:
        fields = [(k.encode(), v.encode("ascii")) for k, v in error.grpc_fields()]
        await _start(send, wire, fields)
        await send({"type": "http.response.body", "body": b""})
    elif wire.streaming:
        await _start(send, wire, ())
        await send({"type": "http.response.body", "body": wire.error_end(error)})
    else:
        await _plain(
            send,
            error.http_status,
            error.connect_body(),
            "application/json",
            extra=[_accepted(wire)],
        )


async def _plain(
    send: Send,
    status: int,
    body: bytes,
    content_type: str,
    extra: Sequence[tuple[bytes, bytes]] = (),
) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", content_type.encode()), *extra],
        }
    )
    await send({"type": "http.response.body", "body": body})


class ConnectTransport:
    """Connect and gRPC-Web ride on the HTTP server (the bootstrap mounts
    ``app`` at ``PREFIX``): nothing of their own to start or stop."""

    def __init__(self, app: ASGIApp, url: Callable[[], str]) -> None:
        self.app = app
        self._url = url

    async def start(self) -> None:
        pass

    async def stop(self, grace: float) -> None:
        pass  # the HTTP server's stop ends the streams

    def describe(self) -> str:
        return f"Connect and gRPC-Web on {self._url()}{PREFIX}"
