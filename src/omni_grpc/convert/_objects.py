"""Generic object codec: JSON object <-> proto message, driven by an ObjectSpec."""

from __future__ import annotations

from typing import Any

from google.protobuf.message import Message

from omni_grpc.convert import _jsontext as jt
from omni_grpc.convert._errors import ConversionError
from omni_grpc.convert._fields import MISSING, Nested, wrong_type
from omni_grpc.convert._schema import ObjectSpec
from omni_grpc.convert._shape import ShapeRecorder, ShapeView, child


def decode_object(spec: ObjectSpec, obj: Any, msg: Message, path: str, rec: ShapeRecorder) -> None:
    """Fills ``msg`` from ``obj``. Keys the spec does not know keep their text;
    a key sequence the encoder would not reproduce is recorded."""
    if type(obj) is not dict:
        raise wrong_type(path, "an object", obj)
    by_key = spec.by_key
    skip_type = spec.type_text is not None
    unknown = False
    for key, value in obj.items():
        field = by_key.get(key)
        if field is None:
            if type(key) is not str:  # from Python code: JSON keys are strings
                raise ConversionError(f"a key is {type(key).__name__}, not a string", path=path)
            if key == "type" and skip_type:
                continue
            rec.raw_value(child(path, key), value)
            unknown = True
        else:
            field.decode(value, msg, f"{path}/{key}", rec)
    keys = list(obj)
    if unknown or keys != default_keys(spec, msg):
        rec.key_order(path, keys)


def default_keys(spec: ObjectSpec, msg: Message) -> list[str]:
    """The keys written for ``msg`` when the shape lists none."""
    keys = ["type"] if spec.type_text is not None else []
    keys.extend(f.key for f in spec.fields if f.present(msg))
    return keys


def encode_object(spec: ObjectSpec, msg: Message, path: str, view: ShapeView | None) -> Any:
    """The object as orjson input: a dict, or a fragment when an unknown key
    holds a lone surrogate."""
    out: dict[str, Any] = {}
    order = view.orders.get(path) if view is not None else None
    if order is None:
        if spec.type_text is not None:
            out["type"] = spec.type_text
        for field in spec.fields:
            if field.present(msg):
                value = field.encode(msg, f"{path}/{field.key}", view)
                if value is not MISSING:
                    out[field.key] = value
        return out
    assert view is not None
    by_key = spec.by_key
    awkward = False
    if spec.type_text is not None and "type" not in order:
        out["type"] = spec.type_text  # the discriminator is always written
    for key in order:
        known = by_key.get(key)
        if known is None:
            if key == "type" and spec.type_text is not None:
                out["type"] = spec.type_text
            else:
                raw = view.raws.get(child(path, key))
                if raw is not None:  # else the hint is stale: the key is gone
                    out[key] = jt.Fragment(raw)
                    awkward = awkward or jt.has_surrogate(key)
            continue
        value = known.encode(msg, child(path, key), view)
        if value is not MISSING:
            out[key] = value
    # Values set after the hint was made (say, by a Go program) are not lost.
    listed = set(order)
    for field in spec.fields:
        if field.key not in listed and field.has_value(msg):
            value = field.encode(msg, f"{path}/{field.key}", view)
            if value is not MISSING:
                out[field.key] = value
    return jt.render_object(out) if awkward else out


Nested.decode_object = staticmethod(decode_object)
Nested.encode_object = staticmethod(encode_object)
