"""``Date`` on every answer but the event streams.

uvicorn runs without its own ``date`` header so that the SSE stream's headers
equal the reference's capture; the JSON answers need one, though: the
reference web client reads ``Date`` as the server's clock (``serverNowMs``)
to time a running task without trusting the browser's clock.
"""

from __future__ import annotations

from email.utils import formatdate

from starlette.types import ASGIApp, Message, Receive, Scope, Send

_EVENT_STREAM = b"text/event-stream"


def http_date() -> str:
    """Now, in RFC 9110's IMF-fixdate form (``Tue, 01 Dec 2026 10:00:00 GMT``)."""
    return formatdate(usegmt=True)


class DateHeader:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def dated(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                names = {name.lower() for name, _ in headers}
                content_type = next((v for n, v in headers if n.lower() == b"content-type"), b"")
                if b"date" not in names and not content_type.startswith(_EVENT_STREAM):
                    headers.append((b"date", http_date().encode()))
                    message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, dated)
