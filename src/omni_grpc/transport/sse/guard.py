"""Refuses what a browser can be tricked into sending, token or no token.

The Host, Origin and one-reading rules are the server's
(``transport/http_checks.py``); this app adds one of its own:

* **Content type.** A body must be ``application/json`` (or ``+json``): a
  cross-site "simple" POST can only send ``text/plain`` or form types, which
  need no CORS preflight. Paths under ``own_media`` prefixes are left to
  their app, which refuses such a body itself in its own protocol's words
  (A2A's ContentTypeNotSupportedError).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from starlette.types import ASGIApp, Receive, Scope, Send

from omni_grpc.transport.http_checks import (
    LOOPBACK_NAMES,
    SINGLE_HEADERS,
    STATE_CHANGING,
    Ambiguous,
    HostOriginPolicy,
    default_hosts,
    has_body,
    host_name,
    is_json_media,
    single_headers,
)
from omni_grpc.transport.sse.errors import error_response

__all__ = ["LOOPBACK_NAMES", "SINGLE_HEADERS", "RequestGuard", "default_hosts", "host_name"]


class RequestGuard:
    def __init__(
        self,
        app: ASGIApp,
        *,
        allowed_hosts: Iterable[str] = LOOPBACK_NAMES,
        allowed_origins: Sequence[str] = (),
        own_media: Sequence[str] = (),
    ) -> None:
        self.app = app
        self.own_media = tuple(own_media)
        self.policy = HostOriginPolicy(allowed_hosts=allowed_hosts, allowed_origins=allowed_origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        problem: tuple[int, str, str] | None = None
        try:
            headers = single_headers(scope["headers"])
        except Ambiguous as exc:
            headers, problem = {}, (400, exc.word, str(exc))
        host = headers.get("host", "")
        if problem is not None:
            pass
        elif not self.policy.host_allowed(host):
            problem = (403, "forbidden_host", f"Host {host!r} is not a name this server answers to")
        elif scope["method"] in STATE_CHANGING:
            origin = headers.get("origin")
            if origin is not None and not self.policy.origin_allowed(origin, host):
                problem = (403, "forbidden_origin", f"Origin {origin!r} may not change state here")
            elif (
                has_body(headers)
                and not is_json_media(headers.get("content-type", ""))
                and not scope["path"].startswith(self.own_media)
            ):
                problem = (
                    415,
                    "unsupported_media_type",
                    "the request body must be application/json",
                )
        if problem is None:
            await self.app(scope, receive, send)
            return
        await error_response(*problem)(scope, receive, send)
