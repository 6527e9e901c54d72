"""Refuses what a browser can be tricked into sending, token or no token.

* **Host.** DNS rebinding points an attacker's name at this server, so the
  victim's browser calls it as a same-origin site. Such requests carry the
  attacker's name in ``Host``: only allowed names pass (by default the
  loopback names, plus the address the server is bound to; any IP literal when
  it listens on every address, since a rebound request never has one).
* **Origin.** A state-changing request (POST, PUT, PATCH, DELETE) whose
  ``Origin`` is neither this server's own nor an allowed CORS origin is a
  cross-site request forgery. Requests without ``Origin`` (curl, SDKs) pass.
* **Content type.** A body must be ``application/json`` (or ``+json``): a
  cross-site "simple" POST can only send ``text/plain`` or form types, which
  need no CORS preflight.
* **One reading only.** A header these checks (or the body's framing) rest
  on, given twice, or ``Content-Length`` beside ``Transfer-Encoding``, means
  one thing to a proxy and another here (request smuggling; the last
  ``Origin`` winning): refused with 400 before anything else is read.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Sequence
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

from omni_grpc.transport.sse.errors import error_response

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
ANY_IP = "<any-ip>"  # in an allow-list: every IP literal
# Headers a request may carry once: the ones the guard, auth and the body's
# framing decide on, and the resume position.
SINGLE_HEADERS = frozenset(
    {
        "host",
        "origin",
        "content-type",
        "content-length",
        "transfer-encoding",
        "authorization",
        "last-event-id",
    }
)


def default_hosts(bind_host: str) -> tuple[str, ...]:
    """The Host names allowed when the operator names none."""
    try:
        address = ipaddress.ip_address(bind_host.strip("[]"))
    except ValueError:
        return (*LOOPBACK_NAMES, bind_host.lower())  # bound by name
    return (*LOOPBACK_NAMES, ANY_IP if address.is_unspecified else str(address))


_HOST = re.compile(r"^(?:\[(?P<ip6>[0-9a-f:.]+)\]|(?P<name>[^:\[\]]*))(?::\d{1,5})?$")


def host_name(host_header: str) -> str:
    """``Host`` without its port, lower-cased; IPv6 without brackets. A value
    that is not ``name[:port]`` or ``[ipv6][:port]`` comes back whole (and so
    matches no allowed name)."""
    host = host_header.strip().lower()
    match = _HOST.match(host)
    if match is None:
        return host
    return match.group("ip6") or match.group("name") or ""


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def _origin_of(value: str) -> str | None:
    parts = urlsplit(value.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return None
    return f"{parts.scheme}://{parts.netloc.lower()}"


def _is_json(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    )


class RequestGuard:
    def __init__(
        self,
        app: ASGIApp,
        *,
        allowed_hosts: Iterable[str] = LOOPBACK_NAMES,
        allowed_origins: Sequence[str] = (),
    ) -> None:
        self.app = app
        hosts = {host_name(h) if h != ANY_IP else h for h in allowed_hosts}
        self.any_host = "*" in hosts
        self.any_ip = ANY_IP in hosts
        self.hosts = hosts
        self.any_origin = "*" in allowed_origins
        self.origins = {o for o in map(_origin_of, allowed_origins) if o is not None}

    def _host_allowed(self, name: str) -> bool:
        return self.any_host or name in self.hosts or (self.any_ip and _is_ip(name))

    def _origin_allowed(self, origin: str, host_header: str) -> bool:
        if self.any_origin:
            return True
        normalized = _origin_of(origin)
        if normalized is None:  # "null" (sandboxed frames, file:) or junk
            return False
        if normalized in self.origins:
            return True
        # Same origin: the page this server sent, under a Host already checked.
        return urlsplit(normalized).netloc == host_header.strip().lower()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers: dict[str, str] = {}
        problem: tuple[int, str, str] | None = None
        for key, value in scope["headers"]:
            name = key.decode("latin-1")
            if name in headers and name in SINGLE_HEADERS:
                problem = (400, "duplicate_header", f"the {_spelled(name)} header is given twice")
                break
            headers[name] = value.decode("latin-1")
        host = headers.get("host", "")
        if problem is not None:
            pass
        elif "content-length" in headers and "transfer-encoding" in headers:
            problem = (
                400,
                "ambiguous_framing",
                "a request may give Content-Length or Transfer-Encoding, not both",
            )
        elif not self._host_allowed(host_name(host)):
            problem = (403, "forbidden_host", f"Host {host!r} is not a name this server answers to")
        elif scope["method"] in STATE_CHANGING:
            origin = headers.get("origin")
            if origin is not None and not self._origin_allowed(origin, host):
                problem = (403, "forbidden_origin", f"Origin {origin!r} may not change state here")
            elif _has_body(headers) and not _is_json(headers.get("content-type", "")):
                problem = (
                    415,
                    "unsupported_media_type",
                    "the request body must be application/json",
                )
        if problem is None:
            await self.app(scope, receive, send)
            return
        await error_response(*problem)(scope, receive, send)


def _spelled(name: str) -> str:
    return "-".join(part.capitalize() for part in name.split("-"))


def _has_body(headers: dict[str, str]) -> bool:
    length = headers.get("content-length")
    if length is not None:
        return length.strip() not in ("", "0")
    return "chunked" in headers.get("transfer-encoding", "").lower()
