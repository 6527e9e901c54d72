"""``GET /``: the built-in page (package data in ``omni_grpc.web``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import cache
from importlib import resources

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

_ASSETS = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/app.css": ("app.css", "text/css; charset=utf-8"),
}


@cache
def asset(name: str) -> bytes:
    return resources.files("omni_grpc.web").joinpath(name).read_bytes()


def _handler(name: str, media_type: str) -> Callable[[Request], Awaitable[Response]]:
    async def handler(_request: Request) -> Response:
        # no-store: a restarted server with a new page must not meet a stale script.
        return Response(asset(name), media_type=media_type, headers={"cache-control": "no-store"})

    return handler


def routes() -> list[BaseRoute]:
    return [
        Route(path, _handler(name, media), methods=["GET"])
        for path, (name, media) in _ASSETS.items()
    ]
