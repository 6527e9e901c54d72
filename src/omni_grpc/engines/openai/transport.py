"""One streaming chat-completions request, reduced to a queue of plain events.

The request runs as its own task so the agent loop can wait on the stream,
its tools and the abort signal at once; cancelling the task closes the HTTP
response. Failures are classified per the reference retry ladder.
"""

from __future__ import annotations

import contextlib
import datetime
import email.utils
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import orjson
from httpx_sse import EventSource, SSEError

from omni_grpc.vocabulary import StopReason

JsonObject = dict[str, Any]


@dataclass(frozen=True)
class StreamChunk:
    data: Any


@dataclass(frozen=True)
class StreamEnd:
    # False when the body ended without the ``data: [DONE]`` terminator.
    done_marker: bool


@dataclass(frozen=True)
class StreamFailure:
    # A StopReason: timeout, malformed, failed or auth.
    status: str
    message: str
    retryable: bool
    # Seconds the endpoint asked to wait before the next attempt (Retry-After,
    # retry-after-ms), when it said; the engine caps and then obeys it.
    retry_after: float | None = None


StreamEvent = StreamChunk | StreamEnd | StreamFailure


def classify_status(code: int, detail: str, retry_after: float | None = None) -> StreamFailure:
    message = f"{code} {detail}".strip()
    if code in (401, 403):
        return StreamFailure(StopReason.AUTH, message, retryable=False)
    if code in (408, 409, 429) or code >= 500:
        return StreamFailure(StopReason.FAILED, message, retryable=True, retry_after=retry_after)
    # Any other 4xx is a request the endpoint will refuse again.
    return StreamFailure(StopReason.FAILED, message, retryable=False)


def retry_after(headers: httpx.Headers, now: Callable[[], float] = time.time) -> float | None:
    """The seconds a response asks the client to wait, or None.

    As the OpenAI and Anthropic SDKs read it: ``retry-after-ms`` (their
    endpoints' finer form) first, then ``Retry-After`` as delay-seconds or an
    HTTP-date (RFC 9110, 10.2.3), the latter against the wall clock ``now``.
    A value that is neither, or negative, says nothing.
    """
    raw_ms = headers.get("retry-after-ms")
    if raw_ms is not None:
        with contextlib.suppress(ValueError):
            if math.isfinite(ms := float(raw_ms)) and ms >= 0:
                return ms / 1000
    raw = headers.get("retry-after")
    if raw is None:
        return None
    raw = raw.strip()
    if raw.isascii() and raw.isdigit():
        return float(raw)
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # an HTTP-date is GMT; a zone-less one is read so
        when = when.replace(tzinfo=datetime.UTC)
    return max(0.0, when.timestamp() - now())


def error_detail(body: bytes) -> str:
    """The ``error.message`` of an OpenAI-style error body, else its text."""
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body.decode("utf-8", errors="replace").strip()[:500]
    if isinstance(parsed, dict):
        error = parsed.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return str(error["message"])
        if isinstance(error, str):
            return error
        if isinstance(parsed.get("message"), str):
            return str(parsed["message"])
    return body.decode("utf-8", errors="replace").strip()[:500]


async def stream_completion(
    client: httpx.AsyncClient,
    url: str,
    body: JsonObject,
    headers: dict[str, str],
    emit: Callable[[StreamEvent], None],
) -> None:
    """POSTs ``body`` and emits every chunk, then one end or failure."""
    try:
        async with client.stream("POST", url, content=orjson.dumps(body), headers=headers) as resp:
            if resp.status_code != 200:
                detail = error_detail(await resp.aread())
                emit(classify_status(resp.status_code, detail, retry_after(resp.headers)))
                return
            async for event in EventSource(resp).aiter_sse():
                if event.data == "[DONE]":
                    emit(StreamEnd(done_marker=True))
                    return
                if not event.data:
                    continue
                try:
                    emit(StreamChunk(orjson.loads(event.data)))
                except orjson.JSONDecodeError:
                    snippet = event.data[:120]
                    emit(
                        StreamFailure(
                            StopReason.MALFORMED, f"a stream event is not JSON: {snippet!r}", True
                        )
                    )
                    return
            emit(StreamEnd(done_marker=False))
    except httpx.TimeoutException as exc:
        emit(StreamFailure(StopReason.TIMEOUT, f"timeout: {_describe(exc)}", True))
    except httpx.ConnectError as exc:
        # Nothing was sent: the endpoint is down or unreachable, not "lost".
        emit(StreamFailure(StopReason.TIMEOUT, _connect_failure(url, exc), True))
    except (httpx.NetworkError, httpx.RemoteProtocolError) as exc:
        emit(StreamFailure(StopReason.TIMEOUT, f"connection lost: {_describe(exc)}", True))
    except SSEError as exc:
        emit(StreamFailure(StopReason.MALFORMED, f"not an event stream: {exc}", True))
    except httpx.HTTPError as exc:
        emit(StreamFailure(StopReason.FAILED, f"request error: {_describe(exc)}", True))


def _describe(exc: Exception) -> str:
    return str(exc) or type(exc).__name__


def _connect_failure(url: str, exc: httpx.ConnectError) -> str:
    """Names the endpoint and the root cause (httpx only says "All connection attempts failed")."""
    where = httpx.URL(url).netloc.decode("ascii", errors="replace")
    cause: BaseException | None = exc
    root: BaseException = exc
    while cause is not None:
        if isinstance(cause, ConnectionRefusedError):
            return f"connection refused by {where}"
        root = cause
        cause = cause.__cause__ or cause.__context__
    why = root.strerror if isinstance(root, OSError) and root.strerror else str(root)
    return f"could not connect to {where}: {why or type(root).__name__}"
