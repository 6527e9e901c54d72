"""The OmniMessage envelope: JSON text or dict <-> ``omni_pb2.OmniMessage``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from omni_grpc.convert import _jsontext as jt
from omni_grpc.convert._base64 import unpack
from omni_grpc.convert._errors import ConversionError
from omni_grpc.convert._fastpath import Twin
from omni_grpc.convert._fastpath_tables import decoder_for, encoder_for
from omni_grpc.convert._fields import MISSING, StrList, wrong_type
from omni_grpc.convert._native import NATIVE
from omni_grpc.convert._objects import decode_object, encode_object
from omni_grpc.convert._schema import (
    ENVELOPE_TYPE_OF_ARM,
    PAYLOAD_BY_ARM,
    PAYLOAD_BY_TYPE,
    SESSION_META,
)
from omni_grpc.convert._shape import ShapeRecorder, ShapeView, child, has_hints
from omni_grpc_proto.omni.v1 import omni_pb2

OmniMessage = omni_pb2.OmniMessage
# Large enough for a tool output carrying several images; configurable per call.
DEFAULT_MAX_BYTES = 64 * 1024 * 1024
_ORIGIN = StrList("origin")
_PLAIN_KEYS = ["timestamp", "type", "payload"]
_ORIGIN_KEYS = ["timestamp", "type", "payload", "origin"]


def parse_message(
    data: bytes | str, *, line: int | None = None, max_bytes: int = DEFAULT_MAX_BYTES
) -> OmniMessage:
    """One JSON text (a trace line, an SSE data field) as an OmniMessage."""
    if len(data) > max_bytes:
        raise ConversionError(
            f"message is {len(data)} bytes, over the {max_bytes}-byte limit", line=line
        )
    if NATIVE is not None and type(data) is bytes:  # the common case, text to wire in C
        wire = NATIVE.encode_text(data)
        if wire is not None:
            return OmniMessage.FromString(wire)
    try:
        obj, clean = jt.loads_checked(data)
    except ConversionError as exc:
        raise exc.at_line(line) from None
    if clean and type(obj) is dict:
        if NATIVE is not None:
            wire = NATIVE.encode(obj)
            if wire is not None:
                return OmniMessage.FromString(wire)
        fast = _fast_decode(obj)
        if fast is not None:
            return fast
    return _general_decode(obj, line)


def message_from_dict(obj: Mapping[str, Any], *, line: int | None = None) -> OmniMessage:
    """A parsed JSON object as an OmniMessage."""
    if type(obj) is dict:
        if NATIVE is not None:
            wire = NATIVE.encode(obj)
            if wire is not None:
                return OmniMessage.FromString(wire)
        try:
            fast = _fast_decode(obj)
        except (UnicodeEncodeError, ValueError, TypeError, OverflowError):
            fast = None  # e.g. a lone surrogate from Python code; the general path explains
        if fast is not None:
            return fast
    return _general_decode(obj, line)


def _fast_decode(obj: dict[str, Any]) -> OmniMessage | None:
    """Reference-form input in one constructor call, or None (see _fastpath)."""
    keys = list(obj)
    if keys != _PLAIN_KEYS and keys != _ORIGIN_KEYS:
        return None
    timestamp, kind, payload = obj["timestamp"], obj["type"], obj["payload"]
    if type(timestamp) is not str or type(kind) is not str or type(payload) is not dict:
        return None
    spec = SESSION_META if kind == "session_meta" else PAYLOAD_BY_TYPE.get(str(payload.get("type")))
    if spec is None or ENVELOPE_TYPE_OF_ARM[str(spec.arm)] != kind:
        return None
    twins: list[Twin] = []
    kwargs = decoder_for(spec)(payload, twins)
    if kwargs is None:
        return None
    if len(keys) == 4:
        origin = obj["origin"]
        if type(origin) is not list or not origin or any(type(o) is not str for o in origin):
            return None
        fields: dict[str, Any] = {"origin": origin}
    else:
        fields = {}
    fields[str(spec.arm)] = kwargs
    msg = OmniMessage(timestamp=timestamp, **fields)
    for key, hint in twins:
        if type(hint) is list:
            msg.key_orders.add(path=f"/payload/{key}", keys=hint)
        else:
            msg.raw_values.add(path=f"/payload/{key}", json=hint)
    return msg


def _general_decode(obj: Any, line: int | None) -> OmniMessage:
    if type(obj) is not dict:
        if isinstance(obj, Mapping):
            obj = dict(obj)
        else:
            raise ConversionError(f"expected a JSON object, got {type(obj).__name__}", line=line)
    msg = OmniMessage()
    rec = ShapeRecorder()
    try:
        _decode_envelope(obj, msg, rec)
    except ConversionError as exc:
        raise exc.at_line(line) from None
    except RecursionError:
        raise ConversionError("nested too deeply to convert", line=line) from None
    if rec.orders or rec.raws:
        rec.fill(msg)
    return msg


def _decode_envelope(obj: dict[str, Any], msg: OmniMessage, rec: ShapeRecorder) -> None:
    unknown = False
    for key, value in obj.items():
        if key == "timestamp":
            if type(value) is not str:
                raise wrong_type("/timestamp", "a string", value)
            if jt.has_surrogate(value):
                rec.raw_value("/timestamp", value)
                value = jt.scrub_surrogates(value)
            msg.timestamp = value
        elif key == "type":
            if type(value) is not str:
                raise wrong_type("/type", "a string", value)
        elif key == "payload":
            _decode_payload(value, obj.get("type"), msg, rec)
        elif key == "origin":
            _ORIGIN.decode(value, msg, "/origin", rec)
        else:
            if type(key) is not str:
                raise ConversionError(f"a key is {type(key).__name__}, not a string")
            rec.raw_value(child("", key), value)
            unknown = True
    if "payload" not in obj:
        raise ConversionError("missing the payload", path="/payload")
    if "type" not in obj:
        raise ConversionError("missing the envelope type", path="/type")
    if "timestamp" not in obj:
        raise ConversionError("missing the timestamp", path="/timestamp")
    keys = list(obj)
    if unknown or keys != _default_envelope_keys(msg):
        rec.key_order("", keys)


def _decode_payload(payload: Any, envelope_type: Any, msg: OmniMessage, rec: ShapeRecorder) -> None:
    if type(payload) is not dict:
        raise wrong_type("/payload", "an object", payload)
    if type(envelope_type) is not str:
        return  # the envelope's own check names the problem
    if envelope_type == "session_meta":
        spec = SESSION_META
    else:
        kind = payload.get("type", MISSING)
        if kind is MISSING:
            raise ConversionError("missing the payload type", path="/payload/type")
        if type(kind) is not str:
            raise wrong_type("/payload/type", "a string", kind)
        found = PAYLOAD_BY_TYPE.get(kind)
        if found is None:
            if not envelope_type:
                # The unknown arm keeps its envelope type as a proto3 string,
                # where empty means unset: such a line could not be written
                # back, so it is refused here, not on the way back.
                raise ConversionError(
                    "the envelope type is empty (a payload of unknown kind needs one)",
                    path="/type",
                )
            msg.unknown.type = jt.scrub_surrogates(kind)
            try:
                msg.unknown.json = jt.dump_value(payload)
            except ConversionError as exc:
                raise ConversionError(exc.reason, path="/payload" + exc.path) from None
            msg.unknown.envelope_type = jt.scrub_surrogates(envelope_type)
            if jt.has_surrogate(envelope_type):
                rec.raw_value("/type", envelope_type)
            return
        spec = found
    arm = str(spec.arm)
    expected = ENVELOPE_TYPE_OF_ARM[arm]
    if envelope_type != expected:
        raise ConversionError(
            f"a {arm} payload travels in a {expected} envelope, not {_quote(envelope_type)}",
            path="/type",
        )
    target = getattr(msg, arm)
    target.SetInParent()
    decode_object(spec, payload, target, "/payload", rec)


def _quote(text: str) -> str:
    shown = jt.string_text(text)
    return shown if len(shown) <= 40 else shown[:37] + '..."'


def _default_envelope_keys(msg: OmniMessage) -> list[str]:
    keys = ["timestamp", "type", "payload"]
    if msg.origin:
        keys.append("origin")
    return keys


def serialize_message(msg: OmniMessage) -> bytes:
    """Compact JSON in reference form (no trailing newline): byte-identical to
    the source when ``msg`` came from JSON, reference builder order otherwise.

    Whatever the message holds, the result is one line of valid JSON whose
    protocol keys agree with the typed fields and appear once, or a
    ``ConversionError`` naming what is inconsistent.
    """
    wire = None
    if NATIVE is not None:  # the common case, wire bytes to text in C
        wire = msg.SerializeToString()
        text = NATIVE.decode_text(wire)
        if text is not None:
            return text
    return jt.dumps(_jsonable(msg, wire))


def encode_message(msg: OmniMessage, wire: bytes | None = None) -> tuple[bytes, bytes]:
    """``msg``'s wire bytes (``wire`` when the caller has them) and its JSON
    text (``serialize_message``'s), each encoded once: the native codec reads
    the text from those very wire bytes. Both are bytes objects of their own
    size, fit to be kept (orjson hands its output back in the buffer it wrote,
    4 KiB at least)."""
    if wire is None:
        wire = msg.SerializeToString()
    if NATIVE is not None:
        text = NATIVE.decode_text(wire)
        if text is not None:
            return wire, text
    return wire, memoryview(jt.dumps(_jsonable(msg, wire))).tobytes()


def encode_message_dict(obj: Mapping[str, Any]) -> tuple[OmniMessage, bytes, bytes]:
    """An engine's message as (message, wire bytes, JSON text): with the native
    codec, one call turns the dict into wire bytes and reads the text from
    them; the message is parsed from the same bytes (no protobuf
    serialization in between)."""
    if NATIVE is not None and type(obj) is dict:
        both = NATIVE.encode_with_text(obj)
        if both is not None:
            wire, text = both
            msg = OmniMessage.FromString(wire)
            if text is None:
                return (msg, *encode_message(msg, wire))
            return msg, wire, text
    msg = message_from_dict(obj)
    return (msg, *encode_message(msg))


def message_to_jsonable(msg: OmniMessage) -> Any:
    """The message as orjson input in reference form: a dict (which may hold
    fragments), or one fragment when an unknown key holds a lone surrogate."""
    return _jsonable(msg, None)


def _jsonable(msg: OmniMessage, wire: bytes | None) -> Any:
    """``message_to_jsonable``, given the message's wire bytes when the caller
    has already serialized it."""
    try:
        return _to_jsonable(msg, wire)
    except RecursionError:
        raise ConversionError("nested too deeply to convert") from None


def _to_jsonable(msg: OmniMessage, wire: bytes | None) -> Any:
    if NATIVE is not None:
        native = NATIVE.decode(msg.SerializeToString() if wire is None else wire)
        if native is not None:
            return native
    if msg.zlib_record:  # the native codec declines it: not a field it knows
        raise ConversionError(
            "a compressed .binpb record (zlib_record) is not a message: "
            "inflate it first (omni_grpc.trace.read_binpb does)"
        )
    msg = unpack(msg)  # base64_values, an elided view (the native codec declines both)
    if not has_hints(msg):
        arm = msg.WhichOneof("payload")
        if arm is not None and arm != "unknown":
            try:
                out: dict[str, Any] = {
                    "timestamp": msg.timestamp,
                    "type": ENVELOPE_TYPE_OF_ARM[arm],
                    "payload": encoder_for(PAYLOAD_BY_ARM[arm])(getattr(msg, arm)),
                }
            except ConversionError:
                pass  # the general codec names the field
            else:
                if msg.origin:
                    out["origin"] = list(msg.origin)
                return out
    view = ShapeView.of(msg)
    order = view.orders.get("") if view is not None else None
    keys: list[str] = list(order) if order is not None else _default_envelope_keys(msg)
    for needed in ("timestamp", "type", "payload"):
        if needed not in keys:
            keys.append(needed)  # the protocol's keys are always written
    if order is not None and msg.origin and "origin" not in order:
        keys.append("origin")
    out = {}
    for key in keys:
        if key == "timestamp":
            out[key] = _exact_string(msg.timestamp, "/timestamp", view)
        elif key == "type":
            out[key] = _envelope_type(msg, view)
        elif key == "payload":
            out[key] = _encode_payload(msg, view)
        elif key == "origin":
            value = _ORIGIN.encode(msg, "/origin", view)
            if value is not MISSING:
                out[key] = value
        elif view is not None:
            raw = view.raws.get(child("", key))
            if raw is not None:
                out[key] = jt.Fragment(raw)
    if order is not None and any(jt.has_surrogate(key) for key in out):
        return jt.render_object(out)
    return out


def _exact_string(value: str, path: str, view: ShapeView | None) -> Any:
    if view is not None:
        raw = view.raws.get(path)
        if raw is not None:
            parsed = jt.loads(raw)
            if type(parsed) is str and jt.scrub_surrogates(parsed) == value:
                return jt.Fragment(raw)
    return value


def _envelope_type(msg: OmniMessage, view: ShapeView | None) -> Any:
    arm = msg.WhichOneof("payload")
    if arm is None:
        raise ConversionError("the message has no payload", path="/payload")
    if arm != "unknown":
        return ENVELOPE_TYPE_OF_ARM[arm]
    kind = msg.unknown.envelope_type
    if not kind:
        raise ConversionError("the unknown payload has no envelope_type", path="/type")
    if kind == "session_meta":
        raise ConversionError(
            "a session_meta envelope holds a session_meta payload, not an unknown one",
            path="/type",
        )
    return _exact_string(kind, "/type", view)


def _encode_payload(msg: OmniMessage, view: ShapeView | None) -> Any:
    arm = msg.WhichOneof("payload")
    if arm is None:
        raise ConversionError("the message has no payload", path="/payload")
    if arm == "unknown":
        return unknown_payload_text(msg.unknown.type, msg.unknown.json, "/payload")
    return encode_object(PAYLOAD_BY_ARM[arm], getattr(msg, arm), "/payload", view)


def unknown_payload_text(kind: str, text: str, path: str, known: Any = PAYLOAD_BY_TYPE) -> Any:
    """The checked JSON of an unknown payload or server event: one object
    whose "type" is the one the typed field names, and not a kind the schema
    knows (that belongs in its own arm)."""
    try:
        exact = jt.canonical(text)
        parsed = jt.loads(exact)
    except ConversionError as exc:
        raise ConversionError(f"the unknown payload is not JSON: {exc.reason}", path=path) from None
    if type(parsed) is not dict:
        raise ConversionError("the unknown payload is not a JSON object", path=path)
    inner = parsed.get("type")
    if type(inner) is not str or jt.scrub_surrogates(inner) != kind:
        raise ConversionError(
            f"the unknown payload's type {_quote(kind)} differs from the type in its JSON",
            path=path + "/type",
        )
    if inner in known:
        raise ConversionError(
            f"{_quote(inner)} is a kind this schema knows: use its own arm, not unknown",
            path=path + "/type",
        )
    return jt.Fragment(exact)


def message_to_dict(msg: OmniMessage) -> dict[str, Any]:
    """The message as plain JSON values (parsed back from its exact text)."""
    result: dict[str, Any] = jt.loads(serialize_message(msg))
    return result


__all__ = [
    "DEFAULT_MAX_BYTES",
    "encode_message",
    "encode_message_dict",
    "message_from_dict",
    "message_to_dict",
    "message_to_jsonable",
    "parse_message",
    "serialize_message",
]
