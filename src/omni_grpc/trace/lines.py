"""Splitting a JSONL byte stream the way the reference ``parseTraceLines`` does:
split on ``\\n``, trim like JavaScript ``String.prototype.trim`` (so CRLF and a BOM
are tolerated), skip blank lines. Streams in constant memory; a line longer than
the limit is reported as oversized instead of being read into memory."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

from omni_grpc.convert import DEFAULT_MAX_BYTES

# The codec's limit: generous for image records, small enough to bound memory.
DEFAULT_MAX_LINE_BYTES = DEFAULT_MAX_BYTES

# JavaScript's WhiteSpace + LineTerminator code points, which trim() removes.
_JS_WHITESPACE = (
    "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
    "\u2009\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
)
_ASCII_WHITESPACE = b"\t\n\v\f\r "


@dataclass(frozen=True, slots=True)
class RawLine:
    number: int  # 1-based physical line number
    data: bytes  # trimmed; empty when oversized
    oversized: bool = False
    # False for a last line the stream ends in without a newline: what a
    # crash mid-write leaves (a torn tail).
    terminated: bool = True


def js_trim(data: bytes) -> bytes:
    """Trim ``data`` like JavaScript ``trim()``; invalid UTF-8 is left as it is."""
    stripped = data.strip(_ASCII_WHITESPACE)
    if not stripped or (stripped[0] < 0x80 and stripped[-1] < 0x80):
        return stripped
    try:
        text = stripped.decode("utf-8")
    except UnicodeDecodeError:
        return stripped
    return text.strip(_JS_WHITESPACE).encode("utf-8")


def iter_lines(
    stream: BinaryIO, *, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
) -> Iterator[RawLine]:
    """Yields the non-blank lines of ``stream`` with their line numbers."""
    number = 0
    while True:
        chunk = stream.readline(max_line_bytes + 1)
        if not chunk:
            return
        number += 1
        if len(chunk) > max_line_bytes and not chunk.endswith(b"\n"):
            # Too long to hold: drain the rest of the line without keeping it.
            while chunk and not chunk.endswith(b"\n"):
                chunk = stream.readline(1024 * 1024)
            yield RawLine(number, b"", oversized=True, terminated=chunk.endswith(b"\n"))
            continue
        data = js_trim(chunk)
        if data:
            yield RawLine(number, data, terminated=chunk.endswith(b"\n"))
