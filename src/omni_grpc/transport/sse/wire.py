"""The SSE wire format, byte-identical to the reference server.

The reference writes frames with hono's ``writeSSE``: an ``event:`` line only
when the event is named, one ``data:`` line per line of the payload, an ``id:``
line when there is an id, then a blank line. It never writes ``retry:``. The
heartbeat is an SSE comment. Headers are the five the reference answers with.
"""

from __future__ import annotations

import re

# The event name the reference gives control events (messages carry none).
from omni_grpc.vocabulary import SERVER_EVENT as SERVER_EVENT

# hono splits the payload on any line ending, so one data line per line.
_LINE_BREAK = re.compile(rb"\r\n|\r|\n")

# A comment line: EventSource ignores it, proxies see traffic.
PING = b": ping\n\n"

DEFAULT_HEARTBEAT_SECONDS = 20.0

# The reference's response headers (tests/conformance/sse_response_headers.json).
# Starlette lower-cases nothing it is given, so the names are written as the
# capture shows them.
SSE_HEADERS: dict[str, str] = {
    "content-type": "text/event-stream",
    "cache-control": "no-cache",
    "connection": "keep-alive",
    "transfer-encoding": "chunked",
    "x-accel-buffering": "no",
}


# A single-line payload this large goes out as a piece of its own, the
# event's own bytes, rather than copied into a frame for every reader: ten
# readers of a 16 MiB event each held such a copy while their socket drained.
PASS_THROUGH_FROM = 1 << 20


def frame_parts(
    data: bytes, *, event_id: str | None = None, event: str | None = None
) -> tuple[bytes, ...]:
    """One SSE frame in pieces whose concatenation is ``encode_frame``'s bytes:
    the whole frame, or (for a large payload) its head, the payload itself and
    its tail."""
    head = b"data: "
    if event:
        _check_field("event", event)
        head = b"event: " + event.encode() + b"\ndata: "
    tail = b"\n\n"
    if event_id:
        _check_field("id", event_id)
        tail = b"\nid: " + event_id.encode() + b"\n\n"
    # Compact JSON escapes its line breaks, so the split is almost never
    # needed: two byte searches (memchr) instead of a regex pass over the
    # payload, which for a message of many MiB sent to many readers was most
    # of the stream's CPU.
    if b"\n" in data or b"\r" in data:
        data = b"\ndata: ".join(_LINE_BREAK.split(data))
    elif len(data) >= PASS_THROUGH_FROM:
        return head, data, tail
    return (b"".join((head, data, tail)),)


def encode_frame(data: bytes, *, event_id: str | None = None, event: str | None = None) -> bytes:
    """One SSE frame. ``data`` is the payload (JSON without a trailing newline).

    Empty ``event`` or ``event_id`` write no line, as in hono (which drops
    falsy fields).
    """
    return b"".join(frame_parts(data, event_id=event_id, event=event))


def _check_field(name: str, value: str) -> None:
    # A line break would end the field early and let the rest forge a frame.
    if "\n" in value or "\r" in value:
        raise ValueError(f"SSE {name} must be a single line: {value!r}")
