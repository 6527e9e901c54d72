"""``--target`` values: a bare host gets the AgentService's default port.

gRPC itself would dial a bare host on 443, which is never an omni-grpc server
started with the defaults. Targets in gRPC's URI forms (``dns:///``,
``unix:``, ``ipv4:`` ...) pass unchanged. The URLs ``serve`` prints,
``grpc://HOST:PORT`` and ``grpcs://HOST:PORT`` (TLS), are taken as printed.
"""

from __future__ import annotations

import ipaddress

DEFAULT_PORT = 50051


def with_default_port(target: str, port: int = DEFAULT_PORT) -> str:
    """``host`` -> ``host:50051``, ``[::1]`` and ``::1`` -> ``[::1]:50051``."""
    if target.startswith("["):
        return target if "]:" in target else f"{target}:{port}"
    if target.count(":") > 1:
        try:
            ipaddress.IPv6Address(target)
        except ValueError:
            return target  # a URI form such as ipv6:[::1]:50051
        return f"[{target}]:{port}"
    if target and ":" not in target:
        return f"{target}:{port}"
    return target  # host:port, or one of gRPC's URI forms (dns:///, unix:, ipv4:)


class TargetError(ValueError):
    """A --target that names no server."""


def split_url(target: str) -> tuple[str, bool]:
    """``grpc://h:p`` -> ``("h:p", False)``, ``grpcs://h:p`` -> ``("h:p", True)``;
    anything else unchanged and without TLS of its own. A path after the
    address, as a URL may carry, is refused: gRPC has no place for it."""
    for scheme, tls in (("grpc://", False), ("grpcs://", True)):
        if target.startswith(scheme):
            address = target[len(scheme) :]
            if "/" in address.rstrip("/"):
                raise TargetError(f"--target {target}: a gRPC address has no path")
            address = address.rstrip("/")
            if not address:
                raise TargetError(f"--target {target}: no host")
            return address, tls
    return target, False
