"""What every HTTP transport (the reference routes and SSE, the dialect,
Connect and gRPC-Web, A2A's HTTP bindings) does the same way, once: the
bearer token (the runtime's ``BearerCheck``) and the race between a
streamed answer and its client leaving (which ends the call's context).

The token is read from ``Authorization: Bearer`` or, because EventSource
cannot set headers, from the ``access_token`` query parameter (RFC 6750
section 2.3). A refusal is the runtime's ``unauthenticated`` row, told in
each transport's own form: the HTTP routes' JSON body (``BearerAuth``),
Connect's error (from the ``HubError``), gRPC's status (its interceptor).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from urllib.parse import parse_qs

import anyio
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from omni_grpc.runtime.errors import STATUSES, ErrorCode, Unauthenticated
from omni_grpc.runtime.interface import BearerCheck, CallContext

# What the HTTP routes' 401 says besides the check's reason.
WHERE_TOKEN = "Authorization header or access_token parameter"


def scope_token(scope: Scope) -> str | None:
    """The bearer token a request presents: its ``Authorization`` header
    (even a malformed one wins, so a wrong header is not rescued by the
    query), else its ``access_token`` parameter."""
    for name, value in scope.get("headers", []):
        if name == b"authorization":
            return BearerCheck.credentials(value.decode("latin-1"))
    query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
    values = query.get("access_token")
    return str(values[0]) if values else None


def unauthenticated_response(exc: Unauthenticated) -> JSONResponse:
    row = STATUSES[ErrorCode.UNAUTHENTICATED]
    return JSONResponse(
        {"error": {"code": row.http_code, "message": f"{exc.reason} ({WHERE_TOKEN})"}},
        status_code=row.http,
        headers={"WWW-Authenticate": "Bearer"},
    )


class BearerAuth:
    """ASGI middleware: every HTTP request but CORS preflights and
    ``public_paths`` presents the token, or is answered 401."""

    def __init__(self, app: ASGIApp, token: str, public_paths: frozenset[str]) -> None:
        self.app = app
        self._check = BearerCheck(token)
        self._public = public_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] == "OPTIONS":
            await self.app(scope, receive, send)  # CORS preflights carry no credentials
            return
        path = scope.get("path", "")[len(scope.get("root_path", "")) :] or "/"
        if path not in self._public:
            try:
                self._check.check(scope_token(scope))
            except Unauthenticated as exc:
                await unauthenticated_response(exc)(scope, receive, send)
                return
        await self.app(scope, receive, send)


async def until_disconnect(
    receive: Receive,
    answer: Callable[[], Awaitable[None]],
    end: Callable[[], Awaitable[None]],
    context: CallContext | None = None,
) -> None:
    """Sends a streamed answer (``answer``) while watching for the client's
    ``http.disconnect``: a client that leaves cancels the answer at once
    (an idle stream would otherwise hold its subscription until a write
    failed) and ends ``context``. ``end`` runs either way, shielded, so no
    runtime subscription outlives its connection."""
    async with anyio.create_task_group() as tg:

        async def watch_disconnect() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass
            if context is not None:
                context.end()
            tg.cancel_scope.cancel()

        tg.start_soon(watch_disconnect)
        try:
            await answer()
        except OSError:
            pass  # the client went away mid-write
        finally:
            with anyio.CancelScope(shield=True):
                await end()
            tg.cancel_scope.cancel()
