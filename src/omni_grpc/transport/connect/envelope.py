"""The length-prefixed envelope Connect streams and gRPC-Web share.

Every message is one flag byte, a 4-byte big-endian length and the bytes.
Flag 0x01 marks a compressed message, 0x02 Connect's end-of-stream message
(JSON), 0x80 gRPC-Web's trailers (HTTP/1-style header lines). gRPC-Web-text
sends the same frames in base64, each response frame on its own (as Envoy
does), so a client decodes what has arrived whatever came before.
"""

from __future__ import annotations

import base64
import binascii
import re
import struct
from dataclasses import dataclass

COMPRESSED = 0x01
END_STREAM = 0x02
TRAILERS = 0x80
_PREFIX = struct.Struct(">BI")
HEADER_SIZE = _PREFIX.size


def frame(flags: int, data: bytes) -> bytes:
    return _PREFIX.pack(flags, len(data)) + data


class EnvelopeError(ValueError):
    """The request body is not the envelopes it should be."""


@dataclass(frozen=True)
class Envelope:
    flags: int
    data: bytes


def single_envelope(body: bytes) -> Envelope:
    """The one request message of a server-streaming (or unary) call."""
    if len(body) < HEADER_SIZE:
        what = "empty" if not body else f"{len(body)} bytes, shorter than an envelope's header"
        raise EnvelopeError(f"the request body is {what}: one enveloped message is expected")
    flags, length = _PREFIX.unpack_from(body)
    end = HEADER_SIZE + length
    if len(body) < end:
        raise EnvelopeError(
            f"the request envelope is truncated: it declares {length} bytes, "
            f"{len(body) - HEADER_SIZE} arrived"
        )
    if len(body) > end:
        raise EnvelopeError(
            f"the request body holds {len(body) - end} bytes after its one message "
            "(a server-streaming call takes exactly one)"
        )
    if flags & ~COMPRESSED:
        raise EnvelopeError(f"the request envelope has unknown flags 0x{flags:02x}")
    return Envelope(flags, body[HEADER_SIZE:end])


def declared_length(head: bytes) -> int | None:
    """The message length an envelope's first bytes declare (None: too few)."""
    if len(head) < HEADER_SIZE:
        return None
    return int(_PREFIX.unpack_from(head)[1])


# One base64 run: groups of four, the last possibly padded.
_B64_RUN = re.compile(rb"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?")


def decode_text(body: bytes) -> bytes:
    """A gRPC-Web-text body: base64, possibly of several padded runs."""
    text = re.sub(rb"\s+", b"", body)
    out = bytearray()
    pos = 0
    while pos < len(text):
        match = _B64_RUN.match(text, pos)
        if match is None or match.end() == pos:
            raise EnvelopeError(f"the grpc-web-text body is not base64 (at byte {pos})")
        try:
            out += base64.b64decode(match.group(), validate=True)
        except binascii.Error as exc:  # pragma: no cover - the pattern admits only valid runs
            raise EnvelopeError(f"the grpc-web-text body is not base64: {exc}") from None
        pos = match.end()
    return bytes(out)
