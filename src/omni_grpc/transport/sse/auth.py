"""Bearer auth for the HTTP routes: the same token as gRPC.

EventSource cannot set headers, so the token is also taken from the
``access_token`` query parameter (RFC 6750 section 2.3). The built-in page and
its assets are public: they hold no data and need the token to fetch any.
"""

from __future__ import annotations

import hmac
from urllib.parse import parse_qs

from starlette.types import ASGIApp, Receive, Scope, Send

from omni_grpc.transport.sse.errors import error_response
from omni_grpc.transport.sse.page import ASSET_PATHS

# /healthz too: load balancers probe health without credentials, as on gRPC.
PUBLIC_PATHS = ASSET_PATHS | {"/favicon.ico", "/healthz"}


def request_token(scope: Scope) -> str | None:
    for name, value in scope.get("headers", []):
        if name == b"authorization":
            header: str = value.decode("latin-1")
            scheme, _, credentials = header.partition(" ")
            if scheme.lower() == "bearer" and credentials.strip():
                return credentials.strip()
            return None
    query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
    values = query.get("access_token")
    return str(values[0]) if values else None


class BearerAuth:
    def __init__(
        self, app: ASGIApp, token: str, public_paths: frozenset[str] = PUBLIC_PATHS
    ) -> None:
        self.app = app
        self._token = token.encode()
        self._public = public_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] == "OPTIONS":
            await self.app(scope, receive, send)  # CORS preflights carry no credentials
            return
        path = scope.get("path", "")[len(scope.get("root_path", "")) :] or "/"
        if path in self._public:
            await self.app(scope, receive, send)
            return
        given = request_token(scope)
        if given is None or not hmac.compare_digest(given.encode(), self._token):
            response = error_response(
                401,
                "unauthenticated",
                "missing or wrong bearer token (Authorization header or access_token parameter)",
                {"WWW-Authenticate": "Bearer"},
            )
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)
