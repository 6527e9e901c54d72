"""Server events (the reference SSE ``event: server_event`` frames, gRPC
``ServerEvent``): JSON <-> proto, as losslessly as messages."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from google.protobuf.message import Message

from omni_grpc.convert import _jsontext as jt
from omni_grpc.convert._errors import ConversionError
from omni_grpc.convert._fields import Field, StrList, wrong_type
from omni_grpc.convert._message import (
    message_from_dict,
    message_to_jsonable,
    unknown_payload_text,
)
from omni_grpc.convert._objects import decode_object, encode_object
from omni_grpc.convert._schema import SERVER_EVENT_BY_ARM, SERVER_EVENT_BY_TYPE, ObjectSpec
from omni_grpc.convert._shape import ShapeRecorder, ShapeView
from omni_grpc_proto.omni.v1 import agent_service_pb2

ServerEvent = agent_service_pb2.ServerEvent


class _Envelope(Field):
    """A whole OmniMessage inside an event (``approval_request.toolCall``);
    it keeps its own shape."""

    __slots__ = ()

    def decode(self, value: Any, msg: Message, path: str, rec: ShapeRecorder) -> None:
        if type(value) is not dict:
            raise wrong_type(path, "an object", value)
        try:
            getattr(msg, self.name).CopyFrom(message_from_dict(value))
        except ConversionError as exc:
            raise ConversionError(exc.reason, path=path + exc.path) from None

    def has_value(self, msg: Message) -> bool:
        return bool(msg.HasField(self.name))

    def encode(self, msg: Message, path: str, view: ShapeView | None) -> Any:
        return message_to_jsonable(getattr(msg, self.name))


_APPROVAL_REQUEST = ObjectSpec(
    agent_service_pb2.ApprovalRequest,
    [_Envelope("toolCall", "tool_call", required=True), StrList("origin")],
    type_text="approval_request",
    arm="approval_request",
)
_BY_TYPE = {**SERVER_EVENT_BY_TYPE, "approval_request": _APPROVAL_REQUEST}
_BY_ARM = {**SERVER_EVENT_BY_ARM, "approval_request": _APPROVAL_REQUEST}


def parse_server_event(data: bytes | str, *, line: int | None = None) -> ServerEvent:
    try:
        obj = jt.loads(data)
    except ConversionError as exc:
        raise exc.at_line(line) from None
    return server_event_from_dict(obj, line=line)


def server_event_from_dict(obj: Mapping[str, Any], *, line: int | None = None) -> ServerEvent:
    if not isinstance(obj, Mapping):
        raise ConversionError(f"expected a JSON object, got {type(obj).__name__}", line=line)
    obj = dict(obj)
    event = ServerEvent()
    kind = obj.get("type")
    if type(kind) is not str:
        raise ConversionError("expected a string", path="/type", line=line)
    spec = _BY_TYPE.get(kind)
    if spec is None:
        event.unknown.type = jt.scrub_surrogates(kind)
        try:
            event.unknown.json = jt.dump_value(obj)
        except ConversionError as exc:
            raise exc.at_line(line) from None
        return event
    rec = ShapeRecorder()
    target = getattr(event, str(spec.arm))
    target.SetInParent()
    try:
        decode_object(spec, obj, target, "", rec)
    except ConversionError as exc:
        raise exc.at_line(line) from None
    if rec.orders or rec.raws:
        rec.fill(event)
    return event


def serialize_server_event(event: ServerEvent) -> bytes:
    return jt.dumps(server_event_to_jsonable(event))


def server_event_to_jsonable(event: ServerEvent) -> Any:
    arm = event.WhichOneof("kind")
    if arm is None:
        raise ConversionError("the server event has no kind")
    if arm == "unknown":
        return unknown_payload_text(event.unknown.type, event.unknown.json, "", _BY_TYPE)
    return encode_object(_BY_ARM[arm], getattr(event, arm), "", ShapeView.of(event))


def server_event_to_dict(event: ServerEvent) -> dict[str, Any]:
    result: dict[str, Any] = jt.loads(serialize_server_event(event))
    return result
