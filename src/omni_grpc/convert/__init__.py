"""Lossless conversion between OmniMessage JSON and protobuf.

JSON -> proto -> JSON gives back the same bytes for anything JavaScript's
``JSON.stringify`` writes for a protocol object; messages built in other
languages (typed fields only) come out in the reference builders' form.
See docs/lossless.md for how.
"""

from omni_grpc.convert._betterproto import from_betterproto, to_betterproto
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
    message_from_dict,
    message_to_dict,
    message_to_jsonable,
    parse_message,
    serialize_message,
)

__all__ = [
    "DEFAULT_MAX_BYTES",
    "ConversionError",
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
