"""``GET /``: the built-in page (package data in ``omni_grpc.web``).

The page offers only the approval modes this server lets clients pick, and is
sent with a Content-Security-Policy that allows nothing but its own script,
style and same-origin requests: the agent's text is rendered as text (its
Markdown is built as DOM nodes, never parsed as HTML), and no injected markup
could load or send anything elsewhere. Images may also come from ``blob:``
URLs, which only the page's own script can mint: it decodes a tool output's
``data:`` images into them, so nothing is fetched from anywhere.
"""

from __future__ import annotations

import html
import re
from collections.abc import Awaitable, Callable, Sequence
from functools import cache
from importlib import resources

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

_ASSETS = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/app.css": ("app.css", "text/css; charset=utf-8"),
    "/markdown.js": ("markdown.js", "text/javascript; charset=utf-8"),
}
# The page and its assets: public, since they hold no data (auth.py).
ASSET_PATHS = frozenset(_ASSETS)
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self' blob:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
_HEADERS = {
    # no-store: a restarted server with a new page must not meet a stale script.
    "cache-control": "no-store",
    "content-security-policy": CONTENT_SECURITY_POLICY,
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
}
_MODE_LABELS = {
    "allow-all": "allow all",
    "ask": "ask me",
    "read-only": "read-only",
    "deny-all": "deny all",
}
_MODE_SELECT = re.compile(rb'(<select id="mode">).*?(\s*</select>)', re.S)


@cache
def asset(name: str) -> bytes:
    return resources.files("omni_grpc.web").joinpath(name).read_bytes()


def render_index(modes: Sequence[str], default: str | None) -> bytes:
    """index.html with one option per allowed mode; ``default`` is selected."""
    chosen = default if default in modes else (modes[0] if modes else None)
    options = b"".join(
        b'\n        <option value="%s"%s>%s</option>'
        % (
            html.escape(mode).encode(),
            b" selected" if mode == chosen else b"",
            html.escape(_MODE_LABELS.get(mode, mode)).encode(),
        )
        for mode in modes
    )
    return _MODE_SELECT.sub(lambda m: m.group(1) + options + m.group(2), asset("index.html"))


def _handler(body: bytes, media_type: str) -> Callable[[Request], Awaitable[Response]]:
    async def handler(_request: Request) -> Response:
        return Response(body, media_type=media_type, headers=_HEADERS)

    return handler


def routes(modes: Sequence[str] | None = None, default: str | None = None) -> list[BaseRoute]:
    """The page's routes; ``modes`` are the approval modes it offers (all by default)."""
    offered = list(modes) if modes is not None else list(_MODE_LABELS)
    out: list[BaseRoute] = []
    for path, (name, media) in _ASSETS.items():
        body = render_index(offered, default) if name == "index.html" else asset(name)
        out.append(Route(path, _handler(body, media), methods=["GET"]))
    return out
