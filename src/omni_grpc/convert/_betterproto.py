"""The bridge between the official protobuf classes and the betterproto2
dataclasses. Both are generated from the same schema, and declaring fields in
field-number order makes their encodings byte-identical, so the wire bytes
are the lossless common ground."""

from __future__ import annotations

from typing import TypeVar

import betterproto2
from google.protobuf.message import Message

from omni_grpc_proto.betterproto.omni import v1 as bp
from omni_grpc_proto.omni.v1 import agent_service_pb2, omni_pb2

_B = TypeVar("_B", bound=betterproto2.Message)
_P = TypeVar("_P", bound=Message)

_OFFICIAL: dict[str, type[Message]] = {
    **{name: getattr(omni_pb2, name) for name in omni_pb2.DESCRIPTOR.message_types_by_name},
    **{
        name: getattr(agent_service_pb2, name)
        for name in agent_service_pb2.DESCRIPTOR.message_types_by_name
    },
}


def to_betterproto(message: Message) -> betterproto2.Message:
    """The betterproto2 twin of an official protobuf message."""
    cls: type[betterproto2.Message] = getattr(bp, message.DESCRIPTOR.name)
    return cls.parse(message.SerializeToString())


def from_betterproto(message: betterproto2.Message) -> Message:
    """The official protobuf twin of a betterproto2 message."""
    cls = _OFFICIAL[type(message).__name__]
    return cls.FromString(bytes(message))
