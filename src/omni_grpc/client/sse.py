"""The SSE client: reads both of the server's SSE formats back, reference
streams into OmniMessages and server events (reconnecting with
``Last-Event-ID``), and dialect runs into their six named events.

It speaks only HTTP, so it serves any reference-compatible server, and an
engine that relays one (``engines/sse_upstream.py``) imports it as it would the
gRPC client beside it.

Usage::

    async with httpx.AsyncClient() as http:
        async for item in read_reference(http, f"{base}/api/sessions/{sid}/stream",
                                         token=token, until_idle=True):
            print(item.data)
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass
from typing import Any

import httpx
import orjson
from httpx_sse import EventSource, ServerSentEvent, aconnect_sse

from omni_grpc.convert import parse_message, parse_server_event
from omni_grpc.vocabulary import (
    AUTHORIZATION_HEADER,
    LAST_EVENT_ID_HEADER,
    SERVER_EVENT,
    DialectEventName,
)
from omni_grpc_proto.omni.v1 import agent_service_pb2, omni_pb2

log = logging.getLogger(__name__)


class SSEStreamError(Exception):
    """The server refused the stream (4xx/5xx) or sent something unreadable."""

    def __init__(self, message: str, *, status: int | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code


@dataclass(frozen=True)
class DialectEvent:
    """One dialect event as received: its name and its JSON object."""

    event: DialectEventName
    data: dict[str, Any]


@dataclass(frozen=True)
class StreamItem:
    """One reference SSE event: exactly one of ``message`` / ``server_event``."""

    event_id: str
    message: omni_pb2.OmniMessage | None
    server_event: agent_service_pb2.ServerEvent | None
    # The JSON text exactly as it came over the wire.
    data: str

    @property
    def server_event_kind(self) -> str | None:
        """``task_state``, ``approval_request``, ``resync_required``, ``unknown``."""
        if self.server_event is None:
            return None
        kind: str = self.server_event.WhichOneof("kind")
        return kind


def auth_headers(token: str | None) -> dict[str, str]:
    return {AUTHORIZATION_HEADER: f"Bearer {token}"} if token else {}


async def _raise_for_status(response: httpx.Response) -> None:
    if response.status_code < 400:
        return
    body = await response.aread()
    code = None
    message = body.decode(errors="replace")
    try:
        parsed = orjson.loads(body)
        if isinstance(parsed, dict) and isinstance(parsed.get("error"), dict):
            parsed = parsed["error"]  # the reference's {"error": {code, message}}
        if isinstance(parsed, dict):
            code = parsed.get("code")
            message = parsed.get("message", message)
    except orjson.JSONDecodeError:
        pass
    request = response.request
    raise SSEStreamError(
        f"{request.method} {request.url} answered {response.status_code}: {message}",
        status=response.status_code,
        code=code,
    )


async def _dispatched(source: EventSource) -> AsyncGenerator[ServerSentEvent, None]:
    """The events the SSE standard dispatches: none for a frame without data.

    httpx-sse keeps the last ``id`` across frames (as the standard asks) and
    then hands out the server's ``: ping`` heartbeat as an event with that id
    and no data, where a browser's EventSource dispatches nothing. Without this
    every reader would fail on the first heartbeat after an event, that is on
    any stream quiet for ``--sse-heartbeat`` seconds. (httpx-sse cannot tell a
    lone empty ``data:`` line from none; our servers never send one.)
    """
    async for sse in source.aiter_sse():
        if sse.data:
            yield sse


def _decode_reference(sse: ServerSentEvent) -> StreamItem:
    try:
        if sse.event == SERVER_EVENT:
            return StreamItem(sse.id, None, parse_server_event(sse.data), sse.data)
        return StreamItem(sse.id, parse_message(sse.data), None, sse.data)
    except ValueError as exc:
        raise SSEStreamError(f"event {sse.id or '(no id)'}: {exc}") from exc


def _is_task_state(item: StreamItem, state: int) -> bool:
    ev = item.server_event
    return ev is not None and ev.WhichOneof("kind") == "task_state" and ev.task_state.state == state


async def read_reference(
    client: httpx.AsyncClient,
    url: str,
    *,
    token: str | None = None,
    last_event_id: str | None = None,
    until_idle: bool = False,
    max_reconnects: int | None = 10,
    retry_delay: float = 0.25,
) -> AsyncGenerator[StreamItem, None]:
    """Follows a reference SSE stream (``GET /api/sessions/{id}/stream``).

    A dropped connection is re-opened with ``Last-Event-ID`` set to the last id
    received, so the server replays the gap: nothing is lost while the server
    still buffers it. When it does not, the server says ``resync_required``,
    which is yielded like any other event (fetch ``/messages`` then).

    ``until_idle`` ends the iteration at the ``task_state idle`` that follows a
    ``task_state running`` (the end of the task being watched). Reconnects
    (``max_reconnects`` in a row without an event in between; None is
    unlimited) wait ``retry_delay`` seconds, doubling up to 5 s.
    """
    seen_running = False
    failures = 0
    delay = retry_delay
    while True:
        headers = auth_headers(token)
        if last_event_id:
            headers[LAST_EVENT_ID_HEADER] = last_event_id
        try:
            async with aconnect_sse(client, "GET", url, headers=headers, timeout=None) as source:
                await _raise_for_status(source.response)
                async for sse in _dispatched(source):
                    item = _decode_reference(sse)
                    if item.event_id:
                        last_event_id = item.event_id
                    failures, delay = 0, retry_delay
                    yield item
                    if _is_task_state(item, agent_service_pb2.SESSION_STATE_RUNNING):
                        seen_running = True
                    elif (
                        until_idle
                        and seen_running
                        and _is_task_state(item, agent_service_pb2.SESSION_STATE_IDLE)
                    ):
                        return
        except (httpx.TransportError, httpx.RemoteProtocolError) as exc:
            log.info("SSE stream %s dropped (%s); reconnecting after %s", url, exc, last_event_id)
        # A clean end of the body is a drop too: the reference stream never ends.
        failures += 1
        if max_reconnects is not None and failures > max_reconnects:
            raise SSEStreamError(f"{url}: gave up after {max_reconnects} reconnects")
        await asyncio.sleep(delay)
        delay = min(delay * 2, 5.0)


async def read_dialect(
    client: httpx.AsyncClient,
    url: str,
    body: Mapping[str, Any],
    *,
    token: str | None = None,
) -> AsyncGenerator[DialectEvent, None]:
    """Runs ``POST /v1/runs`` and yields its dialect events up to ``done``.

    This reader does not resume a dropped run (the server can: see
    docs/sse.md, Last-Event-ID); it raises
    :class:`SSEStreamError` when the stream ends without ``done``.
    """
    async with aconnect_sse(
        client, "POST", url, json=dict(body), headers=auth_headers(token), timeout=None
    ) as source:
        await _raise_for_status(source.response)
        async for sse in _dispatched(source):
            try:
                name = DialectEventName(sse.event)
            except ValueError:
                raise SSEStreamError(f"unknown dialect event {sse.event!r}") from None
            try:
                data = orjson.loads(sse.data)
            except orjson.JSONDecodeError as exc:
                raise SSEStreamError(f"{sse.event} event: invalid JSON data: {exc}") from exc
            if not isinstance(data, dict):
                raise SSEStreamError(f"{sse.event} event: data is not a JSON object")
            yield DialectEvent(name, data)
            if name is DialectEventName.DONE:
                return
    raise SSEStreamError(f"{url}: the stream ended without a done event")
