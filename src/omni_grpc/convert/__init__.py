"""Lossless conversion between OmniMessage JSON and protobuf.

JSON -> proto -> JSON gives back the same bytes for anything JavaScript's
``JSON.stringify`` writes for a protocol object; messages built in other
languages (typed fields only) come out in the reference builders' form.
See docs/lossless.md for how.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from omni_grpc.convert._errors import ConversionError
from omni_grpc.convert._events import (
    parse_server_event,
    serialize_server_event,
    server_event_from_dict,
    server_event_to_dict,
    server_event_to_jsonable,
)
from omni_grpc.convert._message import (
    DEFAULT_MAX_BYTES,
    encode_message,
    encode_message_dict,
    message_from_dict,
    message_to_dict,
    message_to_jsonable,
    parse_message,
    serialize_message,
)

if TYPE_CHECKING:
    from omni_grpc.convert._betterproto import from_betterproto, to_betterproto


def __getattr__(name: str) -> Any:
    # The betterproto2 bridge imports betterproto2 and grpc (about three
    # quarters of a CLI process's import time); only its users pay for it.
    if name in ("from_betterproto", "to_betterproto"):
        from omni_grpc.convert import _betterproto

        return getattr(_betterproto, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DEFAULT_MAX_BYTES",
    "ConversionError",
    "encode_message",
    "encode_message_dict",
    "from_betterproto",
    "message_from_dict",
    "message_to_dict",
    "message_to_jsonable",
    "parse_message",
    "parse_server_event",
    "serialize_message",
    "serialize_server_event",
    "server_event_from_dict",
    "server_event_to_dict",
    "server_event_to_jsonable",
    "to_betterproto",
]
