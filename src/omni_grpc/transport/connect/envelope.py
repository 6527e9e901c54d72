"""The length-prefixed envelope Connect streams and gRPC-Web share.

Every message is one flag byte, a 4-byte big-endian length and the bytes.
Flag 0x01 marks a compressed message, 0x02 Connect's end-of-stream message
(JSON), 0x80 gRPC-Web's trailers (HTTP/1-style header lines). gRPC-Web-text
sends the same frames in base64, each response frame on its own (as Envoy
does), so a client decodes what has arrived whatever came before.
"""

from __future__ import annotations

import binascii
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


class MessageCount(EnvelopeError):
    """No message, or more than one, where a call takes exactly one (gRPC's
    "cardinality violation", answered ``unimplemented``)."""


class EnvelopeTooLarge(EnvelopeError):
    """An envelope that declares more than the limit."""

    def __init__(self, length: int) -> None:
        super().__init__(f"the request envelope declares {length} bytes")
        self.length = length


@dataclass(frozen=True)
class Envelope:
    flags: int
    data: bytes


class SingleMessage:
    """The one request message of a unary or server-streaming call, read
    from its envelopes as they arrive: an envelope that declares more than
    ``limit`` bytes, or a second envelope, is refused as soon as its header
    is in, without reading the rest of the body."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._body = bytearray()

    def feed(self, data: bytes) -> None:
        self._body += data
        if len(self._body) < HEADER_SIZE:
            return
        _, length = _PREFIX.unpack_from(self._body)
        if length > self.limit:
            raise EnvelopeTooLarge(length)
        if len(self._body) >= 2 * HEADER_SIZE + length:
            raise MessageCount(
                "the request body holds more than one message "
                "(a unary or server-streaming call takes exactly one)"
            )

    def finish(self) -> Envelope:
        body = self._body
        if not body:
            raise MessageCount("the request body is empty: one enveloped message is expected")
        if len(body) < HEADER_SIZE:
            raise EnvelopeError(
                f"the request body is {len(body)} bytes, shorter than an envelope's header"
            )
        flags, length = _PREFIX.unpack_from(body)
        end = HEADER_SIZE + length
        if len(body) < end:
            raise EnvelopeError(
                f"the request envelope is truncated: it declares {length} bytes, "
                f"{len(body) - HEADER_SIZE} arrived"
            )
        if len(body) > end:  # fewer than a header's bytes: not a second envelope
            raise EnvelopeError(
                f"the request body holds {len(body) - end} bytes after its one message, "
                "too few for another envelope"
            )
        if flags & ~COMPRESSED:
            raise EnvelopeError(f"the request envelope has unknown flags 0x{flags:02x}")
        return Envelope(flags, bytes(memoryview(body)[HEADER_SIZE:end]))


def single_envelope(body: bytes, limit: int | None = None) -> Envelope:
    """The one request message of a whole body (``SingleMessage`` at once)."""
    reader = SingleMessage(len(body) if limit is None else limit)
    reader.feed(body)
    return reader.finish()


def declared_length(head: bytes) -> int | None:
    """The message length an envelope's first bytes declare (None: too few)."""
    if len(head) < HEADER_SIZE:
        return None
    return int(_PREFIX.unpack_from(head)[1])


# What base64 bodies may carry between groups (the \s of regular expressions).
_WHITESPACE = b" \t\n\r\x0b\x0c"


class Base64Runs:
    """A gRPC-Web-text body decoded as it arrives: base64, possibly several
    padded runs (a client may encode each message on its own), whitespace
    ignored. Each ``feed`` decodes what has arrived, so the work goes in the
    slices the body arrives in, never all at once on the event loop."""

    def __init__(self) -> None:
        self._carry = b""  # an incomplete 4-character group
        self._seen = 0  # base64 characters decoded so far (for error positions)

    def feed(self, chunk: bytes) -> bytes:
        text = self._carry + chunk.translate(None, _WHITESPACE)
        out = bytearray()
        start = 0
        while True:
            pad = text.find(b"=", start)
            if pad < 0:  # no padding: every whole group, the rest waits
                end = start + (len(text) - start) // 4 * 4
            else:  # a run ends with the group holding its padding
                end = start + ((pad - start) // 4 + 1) * 4
                if end > len(text):
                    end = start  # that group is not complete yet
            if end > start:
                out += self._decode(text[start:end])
            if pad < 0 or end == start:
                self._carry = text[end:]
                return bytes(out)
            start = end

    def finish(self) -> None:
        if self._carry:
            raise EnvelopeError(
                f"the grpc-web-text body ends inside a base64 group (at character {self._seen})"
            )

    def _decode(self, run: bytes) -> bytes:
        try:
            out = binascii.a2b_base64(run, strict_mode=True)
        except binascii.Error as exc:
            raise EnvelopeError(
                f"the grpc-web-text body is not base64 (after character {self._seen}): {exc}"
            ) from None
        self._seen += len(run)
        return out


def decode_text(body: bytes) -> bytes:
    """A whole gRPC-Web-text body (``Base64Runs`` at once)."""
    runs = Base64Runs()
    out = runs.feed(body)
    runs.finish()
    return out
