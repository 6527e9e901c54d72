"""The Host and Origin rules every HTTP transport on the server applies.

* **Host.** DNS rebinding points an attacker's name at this server, so the
  victim's browser calls it as a same-origin site. Such requests carry the
  attacker's name in ``Host``: only allowed names pass (by default the
  loopback names, plus the address the server is bound to; any IP literal when
  it listens on every address, since a rebound request never has one).
* **Origin.** A state-changing request (POST, PUT, PATCH, DELETE) whose
  ``Origin`` is neither this server's own nor an allowed CORS origin is a
  cross-site request forgery. Requests without ``Origin`` (curl, SDKs) pass.
* **One reading only.** A header these checks (or the body's framing) rest
  on, given twice, or ``Content-Length`` beside ``Transfer-Encoding``, means
  one thing to a proxy and another here (request smuggling; the last
  ``Origin`` winning): refused before anything else is read.

* **JSON bodies.** A cross-site "simple" POST (no CORS preflight) can only
  send ``text/plain`` or form types, so a body an app reads as JSON must say
  it is JSON (``application/json`` or ``application/*+json``).

Each transport answers a refusal in its own protocol's words (the SSE app's
JSON error, Connect's error, gRPC-Web's status); the rules are these.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping, Sequence
from urllib.parse import urlsplit

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
ANY_IP = "<any-ip>"  # in an allow-list: every IP literal
# Headers a request may carry once: the ones the checks, auth and the body's
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


class Ambiguous(ValueError):
    """A request that reads two ways; ``word`` is the error code's."""

    def __init__(self, word: str, message: str) -> None:
        super().__init__(message)
        self.word = word


def single_headers(raw: Iterable[tuple[bytes, bytes]]) -> dict[str, str]:
    """The request's headers by (lower-case) name; raises ``Ambiguous`` for a
    header of ``SINGLE_HEADERS`` given twice or for two body framings."""
    headers: dict[str, str] = {}
    for key, value in raw:
        name = key.decode("latin-1").lower()
        if name in headers and name in SINGLE_HEADERS:
            raise Ambiguous("duplicate_header", f"the {_spelled(name)} header is given twice")
        headers.setdefault(name, value.decode("latin-1"))
    if "content-length" in headers and "transfer-encoding" in headers:
        raise Ambiguous(
            "ambiguous_framing", "a request may give Content-Length or Transfer-Encoding, not both"
        )
    return headers


def _spelled(name: str) -> str:
    return "-".join(part.capitalize() for part in name.split("-"))


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


def origin_of(value: str) -> str | None:
    """``scheme://host[:port]`` of an Origin value; None for ``null`` or junk."""
    parts = urlsplit(value.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return None
    return f"{parts.scheme}://{parts.netloc.lower()}"


class HostOriginPolicy:
    """The operator's allowed Host names and CORS origins (``*`` for any)."""

    def __init__(
        self, *, allowed_hosts: Iterable[str] = LOOPBACK_NAMES, allowed_origins: Sequence[str] = ()
    ) -> None:
        hosts = {host_name(h) if h != ANY_IP else h for h in allowed_hosts}
        self.any_host = "*" in hosts
        self.any_ip = ANY_IP in hosts
        self.hosts = hosts
        self.any_origin = "*" in allowed_origins
        self.origins = {o for o in map(origin_of, allowed_origins) if o is not None}

    def host_allowed(self, host_header: str) -> bool:
        name = host_name(host_header)
        return self.any_host or name in self.hosts or (self.any_ip and _is_ip(name))

    def origin_allowed(self, origin: str, host_header: str) -> bool:
        if self.any_origin:
            return True
        normalized = origin_of(origin)
        if normalized is None:  # "null" (sandboxed frames, file:) or junk
            return False
        if normalized in self.origins:
            return True
        # Same origin: the page this server sent, under a Host already checked.
        return urlsplit(normalized).netloc == host_header.strip().lower()


def is_json_media(content_type: str) -> bool:
    """``application/json`` or ``application/*+json`` (A2A's ``a2a+json``),
    parameters aside."""
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    )


def has_body(headers: Mapping[str, str]) -> bool:
    """Whether a request (its headers by lower-case name) carries a body."""
    length = headers.get("content-length")
    if length is not None:
        return length.strip() not in ("", "0")
    return "chunked" in headers.get("transfer-encoding", "").lower()
