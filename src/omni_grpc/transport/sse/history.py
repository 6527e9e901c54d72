"""``GET /api/sessions/{id}/messages``: the history, whole or in windows.

Without parameters the body is every recorded message. ``tailLimit=N`` asks
for the newest N units (tasks) and ``before=<fileIndex>:<ordinal>`` with an
optional ``limit=N`` (default 200) for the N units before a cursor; both answer
with a ``page`` envelope (``trace/window.py`` says how windows are cut and
what ``prior`` counts). Every message carries its ``tracePosition``; apart from
that key, appended last, each is the trace's exact bytes, so a client's
dedup of stream copies against history (envelope JSON equality) holds. The
live tail rides full reads and tail windows, never a ``before`` page.
"""

from __future__ import annotations

from dataclasses import dataclass

import orjson
from starlette.datastructures import QueryParams

from omni_grpc.convert import serialize_message
from omni_grpc.runtime.errors import ErrorCode
from omni_grpc.runtime.interface import LiveTail
from omni_grpc.trace.window import Position, Window, format_cursor, parse_cursor
from omni_grpc.transport.sse.errors import ApiError
from omni_grpc_proto.omni.v1 import omni_pb2

MAX_LIMIT = 1000
DEFAULT_BEFORE_LIMIT = 200


@dataclass(frozen=True)
class PageRequest:
    limit: int
    before: Position | None  # None: the tail


def _bad(message: str) -> ApiError:
    return ApiError(ErrorCode.INVALID_REQUEST, message)


def _limit(raw: str, name: str) -> int:
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 4) or not 1 <= int(raw) <= MAX_LIMIT:
        raise _bad(f"{name}: must be an integer from 1 to {MAX_LIMIT}, not {raw!r}")
    return int(raw)


def page_request(query: QueryParams) -> PageRequest | None:
    """The window a query asks for; None for the whole history."""
    tail, before, limit = (query.get(k) for k in ("tailLimit", "before", "limit"))
    if tail is None and before is None:
        if limit is not None:
            raise _bad("limit: only applies with before")
        return None
    if tail is not None:
        if before is not None:
            raise _bad("tailLimit and before cannot be combined")
        if limit is not None:
            raise _bad("limit: only applies with before (tailLimit is the tail's own limit)")
        return PageRequest(_limit(tail, "tailLimit"), None)
    assert before is not None
    cursor = parse_cursor(before)
    if cursor is None:
        raise _bad(f"before: must be a cursor <fileIndex>:<ordinal>, not {before!r}")
    return PageRequest(DEFAULT_BEFORE_LIMIT if limit is None else _limit(limit, "limit"), cursor)


def with_position(msg: omni_pb2.OmniMessage, position: Position) -> bytes:
    data = serialize_message(msg)
    where = b'"tracePosition":{"fileIndex":%d,"ordinal":%d}}' % position
    return data[:-1] + (b"," if len(data) > 2 else b"") + where


def body(
    records: list[tuple[Position, omni_pb2.OmniMessage]],
    live: LiveTail | None,
    page: Window | None,
) -> bytes:
    parts = [with_position(msg, pos) for pos, msg in records]
    out = b'{"messages":[' + b",".join(parts) + b"]"
    if live is not None:
        # As the reference: a client drops its buffered partials up to the
        # cursor (same epoch) and paints these fragments instead.
        fragments = b",".join(serialize_message(f) for f in live.fragments)
        out += b',"live":{"cursor":' + orjson.dumps(live.cursor)
        out += b',"fragments":[' + fragments + b"]}"
    if page is not None:
        envelope: dict[str, object] = {}
        if page.before is not None:
            envelope["before"] = format_cursor(page.before)
        envelope["earlierTurns"] = page.prior.turns
        envelope["prior"] = page.prior.to_json()
        out += b',"page":' + orjson.dumps(envelope)
    return out + b"}"
