"""Lossless conversion between OmniMessage JSON and protobuf.

JSON -> proto -> JSON gives back the same bytes for anything JavaScript's
``JSON.stringify`` writes for a protocol object; messages built in other
languages (typed fields only) come out in the reference builders' form.
See docs/lossless.md for how.
"""

from omni_grpc.convert._errors import ConversionError
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
    "message_from_dict",
    "message_to_dict",
    "message_to_jsonable",
    "parse_message",
    "serialize_message",
]
