"""Which protocol a request speaks, and how each one frames an answer.

The content type decides, as connect-go decides it:

| content type | protocol | methods |
| --- | --- | --- |
| ``application/proto``, ``application/json`` | Connect unary | unary |
| ``application/connect+proto``, ``application/connect+json`` | Connect streaming | streaming |
| ``application/grpc-web[+proto\\|+json]`` | gRPC-Web | all |
| ``application/grpc-web-text[+proto]`` | gRPC-Web, base64 | all |

A :class:`Wire` knows its protocol's headers, message frames and endings;
the app decides what to send.
"""

from __future__ import annotations

import base64
import enum
from dataclasses import dataclass

from omni_grpc.transport.connect.envelope import END_STREAM, TRAILERS, frame
from omni_grpc.transport.connect.errors import CallError


class Protocol(enum.StrEnum):
    CONNECT = "connect"
    GRPC_WEB = "grpc-web"


class Codec(enum.StrEnum):
    PROTO = "proto"
    JSON = "json"


# What the HTTP port accepts, for a 415's Accept-Post.
ACCEPTED = (
    "application/proto, application/json, application/connect+proto, "
    "application/connect+json, application/grpc-web, application/grpc-web+proto, "
    "application/grpc-web+json, application/grpc-web-text, application/grpc-web-text+proto"
)


class Unsupported(ValueError):
    """No protocol here takes this content type for this method."""


@dataclass(frozen=True)
class Wire:
    protocol: Protocol
    codec: Codec
    # gRPC-Web-text: the body goes both ways in base64.
    text: bool = False
    streaming: bool = False

    @property
    def content_type(self) -> str:
        if self.protocol is Protocol.GRPC_WEB:
            base = "application/grpc-web-text" if self.text else "application/grpc-web"
            return f"{base}+{self.codec.value}"
        if self.streaming:
            return f"application/connect+{self.codec.value}"
        return f"application/{self.codec.value}"

    @property
    def enveloped(self) -> bool:
        """Messages go in envelopes (all but Connect unary)."""
        return self.protocol is Protocol.GRPC_WEB or self.streaming

    def _out(self, data: bytes) -> bytes:
        return base64.b64encode(data) if self.text else data

    def message(self, data: bytes) -> bytes:
        """One response message as its bytes go on the body."""
        if not self.enveloped:
            return data
        return self._out(frame(0, data))

    def success_end(self) -> bytes:
        """What closes a stream that went well."""
        if self.protocol is Protocol.GRPC_WEB:
            return self._out(frame(TRAILERS, b"grpc-status: 0\r\n"))
        if self.streaming:
            return frame(END_STREAM, b"{}")
        return b""

    def error_end(self, error: CallError) -> bytes:
        """What closes a stream that failed after its headers were sent."""
        if self.protocol is Protocol.GRPC_WEB:
            lines = "".join(f"{k}: {v}\r\n" for k, v in error.grpc_fields())
            return self._out(frame(TRAILERS, lines.encode("ascii")))
        return frame(END_STREAM, error.end_stream())


def negotiate(content_type: str, *, streaming: bool) -> Wire:
    """The wire for a request of ``content_type`` to a method that streams
    its responses (``streaming``) or not; raises ``Unsupported``."""
    media = content_type.split(";", 1)[0].strip().lower()
    if media.startswith("application/grpc-web"):
        text = media.startswith("application/grpc-web-text")
        rest = media.removeprefix("application/grpc-web-text" if text else "application/grpc-web")
        codec = {"": Codec.PROTO, "+proto": Codec.PROTO, "+json": Codec.JSON}.get(rest)
        if codec is None or (text and codec is Codec.JSON):
            raise Unsupported(f"gRPC-Web with the codec {rest[1:]!r} is not served here")
        return Wire(Protocol.GRPC_WEB, codec, text=text, streaming=streaming)
    if media.startswith("application/connect+"):
        codec = _codec(media.removeprefix("application/connect+"))
        if not streaming:
            raise Unsupported(
                f"{media} is for streaming methods; a unary call sends application/{codec}"
            )
        return Wire(Protocol.CONNECT, codec, streaming=True)
    if media in ("application/proto", "application/json"):
        codec = _codec(media.removeprefix("application/"))
        if streaming:
            raise Unsupported(
                f"{media} is for unary methods; a streaming call sends application/connect+{codec}"
            )
        return Wire(Protocol.CONNECT, codec)
    if media.startswith("application/grpc"):
        raise Unsupported("gRPC itself is served on the gRPC port (HTTP/2), not here")
    raise Unsupported(f"content type {content_type!r} is not a Connect or gRPC-Web request")


def _codec(name: str) -> Codec:
    try:
        return Codec(name)
    except ValueError:
        raise Unsupported(f"the codec {name!r} is not served here (proto or json)") from None
