"""Splitting a JSONL byte stream the way the reference ``parseTraceLines`` does:
split on ``\\n``, trim like JavaScript ``String.prototype.trim`` (so CRLF and a BOM
are tolerated), skip blank lines. Streams in constant memory; a line longer than
the limit is reported as oversized instead of being read into memory."""

from __future__ import annotations

from collections.abc import Callable, Iterator
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


# Lines are read in blocks of about this size: reading them one by one cost
# more than converting them.
_BLOCK_BYTES = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Block:
    """Whole lines as read: ``first`` is the number of the first. Only the
    stream's last line may lack its newline (a torn tail)."""

    first: int
    data: bytes


def iter_blocks(
    stream: BinaryIO, *, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
) -> Iterator[Block | RawLine]:
    """The stream in blocks of whole lines. A line that outgrows the limit
    before its newline arrives is drained without being kept and comes as an
    oversized :class:`RawLine`, so memory stays bounded by the limit."""
    # read1: what is there now, so a live pipe is converted as it arrives
    read = getattr(stream, "read1", stream.read)
    number = 1
    parts: list[bytes] = []  # the line not yet ended
    held = 0
    chunk = read(_BLOCK_BYTES)
    while True:
        if not chunk:
            if parts:
                yield Block(number, b"".join(parts))
            return
        cut = chunk.rfind(b"\n") + 1
        if cut:
            data = b"".join([*parts, chunk[:cut]]) if parts else chunk[:cut]
            # The pieces of a long line go before it is handed on, not after:
            # a multi-megabyte line is held once, not twice.
            parts, held = ([chunk[cut:]], len(chunk) - cut) if cut < len(chunk) else ([], 0)
            yield Block(number, data)
            number += data.count(b"\n")
        else:
            parts.append(chunk)
            held += len(chunk)
        if held > max_line_bytes:
            rest = _drain(read)
            yield RawLine(number, b"", oversized=True, terminated=rest is not None)
            if rest is None:
                return
            number += 1
            parts, held = [], 0
            chunk = rest or read(_BLOCK_BYTES)  # what follows may hold whole lines
            continue
        chunk = read(_BLOCK_BYTES)


def _drain(read: Callable[[int], bytes]) -> bytes | None:
    """Reads past the end of the current line; what follows it, or None when
    the stream ends first."""
    while True:
        chunk = read(_BLOCK_BYTES)
        if not chunk:
            return None
        end = chunk.find(b"\n")
        if end >= 0:
            return chunk[end + 1 :]


def raw_line(number: int, piece: bytes, terminated: bool, max_line_bytes: int) -> RawLine | None:
    """One line without its newline as the reader reports it (None: blank)."""
    if len(piece) > max_line_bytes:
        return RawLine(number, b"", oversized=True, terminated=terminated)
    data = js_trim(piece)
    return RawLine(number, data, terminated=terminated) if data else None


def block_lines(block: Block, max_line_bytes: int) -> Iterator[RawLine]:
    """The non-blank lines of a block."""
    pieces = block.data.split(b"\n")
    last = len(pieces) - 1  # what follows the last newline: empty unless torn
    for i, piece in enumerate(pieces):
        if i == last and not piece:
            return
        raw = raw_line(block.first + i, piece, i < last, max_line_bytes)
        if raw is not None:
            yield raw


def iter_lines(
    stream: BinaryIO, *, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
) -> Iterator[RawLine]:
    """Yields the non-blank lines of ``stream`` with their line numbers."""
    for item in iter_blocks(stream, max_line_bytes=max_line_bytes):
        if isinstance(item, RawLine):
            yield item
        else:
            yield from block_lines(item, max_line_bytes)
