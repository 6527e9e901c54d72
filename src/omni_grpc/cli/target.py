"""``--target`` values: a bare host gets the AgentService's default port.

gRPC itself would dial a bare host on 443, which is never an omni-grpc server
started with the defaults. Targets in gRPC's URI forms (``dns:///``,
``unix:``, ``ipv4:`` ...) pass unchanged.
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
