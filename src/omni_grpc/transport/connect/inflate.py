"""Inflating a gzip request message: whole, checked, and never past the limit.

A gzip body is untrusted twice over: a few hundred kilobytes can inflate to
gigabytes (a bomb), and a body can be cut short or carry more than one
stream. So a message is inflated under three rules:

* **Refused before any work when it says it is too large.** A gzip member
  ends with its inflated size (ISIZE, modulo 2**32); a body whose trailer
  declares more than the limit is refused at once, without inflating a byte.
* **Never inflated past what it declares.** Output past the declared size
  means the trailer lies, or the message is 4 GiB or more: refused as soon
  as that much has come out, so a lying bomb costs at most ``min(declared,
  limit) + one step``, and memory never holds more than that.
* **Whole or refused.** One gzip member, its CRC-32 and length checked by
  zlib at its end; a body cut before its trailer, with bytes after it, or
  with a second member (whose content a single inflater would drop) is
  refused, naming which.

zlib releases the GIL while it inflates, and inflating goes in steps of
``STEP`` output bytes: a large message is inflated in a worker thread
(``app.py``) while the event loop serves everyone else.
"""

from __future__ import annotations

import zlib

GZIP_MAGIC = b"\x1f\x8b"
# A gzip member's 10-byte header and 8-byte trailer (CRC-32, ISIZE).
HEADER_AND_TRAILER = 18
# Output bytes per inflate call: one step is a millisecond or two of CPU.
STEP = 1 << 20


class InflateError(ValueError):
    """A gzip body that is not one whole member."""


class TooLarge(InflateError):
    """A gzip body that declares, or inflates to, more than the limit."""


def declared_size(body: bytes) -> int:
    """The inflated size a single-member gzip body's trailer declares."""
    return int.from_bytes(body[-4:], "little")


def inflate_gzip(body: bytes, limit: int, step: int = STEP) -> bytes:
    """``body`` (one gzip member) inflated; raises ``TooLarge`` past
    ``limit`` bytes and ``InflateError`` for anything but one whole member."""
    if len(body) < HEADER_AND_TRAILER:
        raise InflateError(
            f"the gzip body is {len(body)} bytes, too short for a gzip header and trailer"
        )
    if body[:2] != GZIP_MAGIC:
        raise InflateError("the body is not gzip (it does not start with the gzip magic bytes)")
    declared = declared_size(body)
    if declared > limit:
        raise TooLarge(f"the gzip body declares {declared} bytes in its trailer")
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    chunks: list[bytes] = []
    size = 0
    pending = body
    try:
        while not inflater.eof:
            # One byte past the declared size is enough to know it lies.
            out = inflater.decompress(pending, min(step, declared - size + 1))
            pending = inflater.unconsumed_tail
            size += len(out)
            if size > declared:
                raise InflateError(
                    f"the gzip body inflates past the {declared} bytes its last 4 bytes "
                    "declare (its trailer is wrong or missing, or more follows it)"
                )
            chunks.append(out)
            if not out and not pending:
                break  # all input read, nothing more to come out: cut short
    except zlib.error as exc:
        raise InflateError(f"the gzip body does not inflate: {exc}") from None
    if not inflater.eof:
        raise InflateError("the gzip body is cut short: it ends before its trailer")
    rest = inflater.unused_data
    if rest.startswith(GZIP_MAGIC):
        raise InflateError("the gzip body holds a second gzip member; one is expected")
    if rest:
        raise InflateError(f"the gzip body has {len(rest)} bytes after its trailer")
    return b"".join(chunks)
