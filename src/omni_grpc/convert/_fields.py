"""Field codecs: how one JSON key maps onto one protobuf field.

Every codec decodes a JSON value into its typed field, recording the exact
text in the shape when the typed field can only approximate it (the *view*),
and encodes the typed field back, preferring that exact text while it still
decodes to the field's current value, so an edited field never loses to a
stale hint.
"""

from __future__ import annotations

import abc
import functools
from collections.abc import Callable
from typing import Any

from google.protobuf import struct_pb2
from google.protobuf.message import Message

from omni_grpc.convert import _jsontext as jt
from omni_grpc.convert._errors import ConversionError
from omni_grpc.convert._shape import ShapeRecorder, ShapeView, child

MISSING: Any = object()  # "write no value for this key"
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1


def type_name(value: Any) -> str:
    return {
        dict: "an object",
        list: "an array",
        str: "a string",
        bool: "a boolean",
        int: "a number",
        float: "a number",
        type(None): "null",
    }.get(type(value), type(value).__name__)


def wrong_type(path: str, expected: str, value: Any) -> ConversionError:
    return ConversionError(f"expected {expected}, got {type_name(value)}", path=path)


class Field(abc.ABC):
    """One JSON key of an object. ``required`` keys are written even when the
    typed value is empty, the way the reference builders write them."""

    __slots__ = ("key", "name", "required")

    def __init__(self, key: str, name: str | None = None, *, required: bool = False) -> None:
        self.key = key
        self.name = name or key
        self.required = required

    @abc.abstractmethod
    def decode(self, value: Any, msg: Message, path: str, rec: ShapeRecorder) -> None:
        """Sets the typed field from ``value``; raises ConversionError on a wrong type."""

    # -- encoding --------------------------------------------------------
    def present(self, msg: Message) -> bool:
        """Whether the key is written when the shape lists no keys."""
        return self.required or self.has_value(msg)

    def has_value(self, msg: Message) -> bool:
        """Whether the typed field holds something beyond its zero value."""
        return bool(getattr(msg, self.name))

    def encode(self, msg: Message, path: str, view: ShapeView | None) -> Any:
        """The JSON-ready value (orjson input or Fragment), or MISSING."""
        if view is not None:
            raw = view.raws.get(path)
            if raw is not None and self.raw_matches(raw, msg):
                return jt.Fragment(raw)
        return self.encode_typed(msg)

    def raw_matches(self, raw: str, msg: Message) -> bool:
        try:
            return bool(self.view_of(jt.loads(raw)) == self.typed(msg))
        except (ConversionError, TypeError, ValueError):
            return False

    def typed(self, msg: Message) -> Any:
        return getattr(msg, self.name)

    def view_of(self, value: Any) -> Any:
        return value

    def encode_typed(self, msg: Message) -> Any:
        return getattr(msg, self.name)


class Str(Field):
    """A string; lone surrogates are kept in the shape, U+FFFD in the field."""

    __slots__ = ()

    def decode(self, value: Any, msg: Message, path: str, rec: ShapeRecorder) -> None:
        if type(value) is not str:
            raise wrong_type(path, "a string", value)
        if jt.has_surrogate(value):
            rec.raw(path, jt.dump_value(value))
            value = jt.scrub_surrogates(value)
        setattr(msg, self.name, value)

    def view_of(self, value: Any) -> Any:
        return jt.scrub_surrogates(value) if type(value) is str else MISSING


class OptStr(Str):
    """A proto3 ``optional string``: presence is explicit."""

    __slots__ = ("nullable",)

    def __init__(
        self, key: str, name: str | None = None, *, required: bool = False, nullable: bool = False
    ) -> None:
        super().__init__(key, name, required=required)
        self.nullable = nullable

    def decode(self, value: Any, msg: Message, path: str, rec: ShapeRecorder) -> None:
        if value is None and self.nullable:
            msg.ClearField(self.name)  # null: unset, written back as null
            return
        if type(value) is not str:
            raise wrong_type(path, "a string or null" if self.nullable else "a string", value)
        super().decode(value, msg, path, rec)

    def has_value(self, msg: Message) -> bool:
        return bool(msg.HasField(self.name))

    def typed(self, msg: Message) -> Any:
        return getattr(msg, self.name) if msg.HasField(self.name) else None

    def view_of(self, value: Any) -> Any:
        if value is None and self.nullable:
            return None
        return super().view_of(value)

    def encode_typed(self, msg: Message) -> Any:
        if msg.HasField(self.name):
            return getattr(msg, self.name)
        return None if self.nullable else MISSING


class Enum(Field):
    """A string union as a proto enum; an unknown string keeps its text."""

    __slots__ = ("to_number", "to_text")

    def __init__(self, key: str, values: dict[str, int], name: str | None = None) -> None:
        super().__init__(key, name)
        self.to_number = values
        self.to_text = {number: text for text, number in values.items()}

    def decode(self, value: Any, msg: Message, path: str, rec: ShapeRecorder) -> None:
        if type(value) is not str:
            raise wrong_type(path, "a string", value)
        number = self.to_number.get(value)
        if number is None:
            rec.raw(path, jt.dump_value(value))
            number = 0
        setattr(msg, self.name, number)

    def view_of(self, value: Any) -> Any:
        return self.to_number.get(value, 0) if type(value) is str else MISSING

    def encode_typed(self, msg: Message) -> Any:
        return self.to_text.get(getattr(msg, self.name), MISSING)


def _int_view(value: Any) -> int:
    if type(value) is int:
        return value if _INT64_MIN <= value <= _INT64_MAX else 0
    truncated = int(value)  # a float: finite, since JSON has no NaN
    return truncated if _INT64_MIN <= truncated <= _INT64_MAX else 0


class Int(Field):
    """A JavaScript number held in an int64; other numbers keep their text."""

    __slots__ = ()

    def decode(self, value: Any, msg: Message, path: str, rec: ShapeRecorder) -> None:
        kind = type(value)
        if kind is not int and kind is not float:
            raise wrong_type(path, "a number", value)
        number = _int_view(value)
        if kind is float or number != value:
            rec.raw(path, jt.dump_value(value))
        setattr(msg, self.name, number)

    def view_of(self, value: Any) -> Any:
        return _int_view(value) if type(value) in (int, float) else MISSING


class OptInt(Int):
    __slots__ = ()

    def has_value(self, msg: Message) -> bool:
        return bool(msg.HasField(self.name))

    def typed(self, msg: Message) -> Any:
        return getattr(msg, self.name) if msg.HasField(self.name) else None

    def encode_typed(self, msg: Message) -> Any:
        return getattr(msg, self.name) if msg.HasField(self.name) else MISSING


class StrList(Field):
    """An array of strings; optional ones are written only when non-empty."""

    __slots__ = ()

    def decode(self, value: Any, msg: Message, path: str, rec: ShapeRecorder) -> None:
        if type(value) is not list:
            raise wrong_type(path, "an array of strings", value)
        target = getattr(msg, self.name)
        for index, item in enumerate(value):
            if type(item) is not str:
                raise wrong_type(f"{path}/{index}", "a string", item)
            if jt.has_surrogate(item):
                rec.raw(f"{path}/{index}", jt.dump_value(item))
                item = jt.scrub_surrogates(item)
            target.append(item)

    def has_value(self, msg: Message) -> bool:
        return len(getattr(msg, self.name)) > 0

    def encode(self, msg: Message, path: str, view: ShapeView | None) -> Any:
        items: list[Any] = list(getattr(msg, self.name))
        if view is not None and view.raws:
            for index, item in enumerate(items):
                raw = view.raws.get(f"{path}/{index}")
                if raw is not None and jt.scrub_surrogates(jt.loads(raw)) == item:
                    items[index] = jt.Fragment(raw)
        return items


def struct_view(value: Any) -> Any:
    """What a google.protobuf.Value can hold of ``value``: doubles, UTF-8."""
    kind = type(value)
    if kind is dict:
        return {jt.scrub_surrogates(k): struct_view(v) for k, v in value.items()}
    if kind is list:
        return [struct_view(v) for v in value]
    if kind is int:
        return float(value)
    if kind is str:
        return jt.scrub_surrogates(value)
    return value


def value_to_python(value: struct_pb2.Value) -> Any:
    kind = value.WhichOneof("kind")
    if kind == "struct_value":
        return {k: value_to_python(v) for k, v in value.struct_value.fields.items()}
    if kind == "list_value":
        return [value_to_python(v) for v in value.list_value.values]
    if kind == "string_value":
        return value.string_value
    if kind == "number_value":
        return value.number_value
    if kind == "bool_value":
        return value.bool_value
    return None


def struct_to_python(struct: struct_pb2.Struct) -> dict[str, Any]:
    return {k: value_to_python(v) for k, v in struct.fields.items()}


def _canonical(value: Any) -> Any:
    """Struct content as JavaScript would write it: sorted keys (a Struct
    has no order), integral doubles as integers."""
    kind = type(value)
    if kind is dict:
        return {k: _canonical(value[k]) for k in sorted(value)}
    if kind is list:
        return [_canonical(v) for v in value]
    if kind is float:
        return jt.Fragment(jt.js_number(value))
    return value


def _fingerprint(value: Any) -> bytes:
    return jt.dumps(_canonical(value))


class StructField(Field):
    """A JSON object carried as google.protobuf.Struct, which other languages
    read natively; its exact text rides in the shape when the Struct alone
    (doubles, no key order) would not give the same bytes back."""

    __slots__ = ()

    def decode(self, value: Any, msg: Message, path: str, rec: ShapeRecorder) -> None:
        if type(value) is not dict:
            raise wrong_type(path, "an object", value)
        viewed = struct_view(value)
        target = getattr(msg, self.name)
        target.SetInParent()  # {} is a value too
        target.update(viewed)
        twin = self.twin(value, viewed)
        if twin is not None:
            rec.raw(path, twin)

    @staticmethod
    def twin(value: dict[str, Any], viewed: Any = None) -> str | None:
        """The exact text of ``value`` when the Struct alone would not give it back."""
        exact = jt.dump_value(value)
        if exact.encode() == _fingerprint(struct_view(value) if viewed is None else viewed):
            return None
        return exact

    def has_value(self, msg: Message) -> bool:
        return bool(msg.HasField(self.name))

    def raw_matches(self, raw: str, msg: Message) -> bool:
        # Equal Structs have equal deterministic bytes (map keys sorted), a
        # C-speed comparison; the twin's side is cached, since twins (JSON
        # Schemas, mostly) repeat.
        expected = _struct_bytes_of_text(raw)
        current: bytes = getattr(msg, self.name).SerializeToString(deterministic=True)
        return expected is not None and current == expected

    def encode_typed(self, msg: Message) -> Any:
        return _canonical(struct_to_python(getattr(msg, self.name)))


@functools.lru_cache(maxsize=1024)
def _struct_bytes_of_text(text: str) -> bytes | None:
    """Deterministic bytes of the Struct a JSON object text decodes to."""
    try:
        parsed = jt.loads(text)
    except ConversionError:
        return None
    if type(parsed) is not dict:
        return None
    struct = struct_pb2.Struct()
    struct.update(struct_view(parsed))
    result: bytes = struct.SerializeToString(deterministic=True)
    return result


class NumberOrLabel(Field):
    """``model_context_window``: a token count or a label like "unknown"."""

    __slots__ = ("label_name", "number_name", "oneof")

    def __init__(self, key: str, number_name: str, label_name: str, oneof: str) -> None:
        super().__init__(key)
        self.number_name = number_name
        self.label_name = label_name
        self.oneof = oneof

    def decode(self, value: Any, msg: Message, path: str, rec: ShapeRecorder) -> None:
        kind = type(value)
        if kind is str:
            Str(self.key, self.label_name).decode(value, msg, path, rec)
        elif kind is int or kind is float:
            Int(self.key, self.number_name).decode(value, msg, path, rec)
            if not msg.HasField(self.number_name):  # a zero count still selects the arm
                setattr(msg, self.number_name, 0)
        else:
            raise wrong_type(path, "a number or a string", value)

    def has_value(self, msg: Message) -> bool:
        return bool(msg.WhichOneof(self.oneof) is not None)

    def typed(self, msg: Message) -> Any:
        arm = msg.WhichOneof(self.oneof)
        return None if arm is None else getattr(msg, arm)

    def view_of(self, value: Any) -> Any:
        if type(value) is str:
            return jt.scrub_surrogates(value)
        return _int_view(value) if type(value) in (int, float) else MISSING

    def encode_typed(self, msg: Message) -> Any:
        arm = msg.WhichOneof(self.oneof)
        return MISSING if arm is None else getattr(msg, arm)


# Nested objects need the object codec, which needs these fields: the object
# codec module plugs itself in through these two hooks.
DecodeObject = Callable[[Any, Any, Message, str, ShapeRecorder], None]
EncodeObject = Callable[[Any, Message, str, ShapeView | None], dict[str, Any]]


class Nested(Field):
    """A nested object (TokenCounts); ``many`` for an array of them."""

    __slots__ = ("many", "spec")
    decode_object: DecodeObject
    encode_object: EncodeObject

    def __init__(self, key: str, spec: Any, *, many: bool = False, required: bool = True) -> None:
        super().__init__(key, required=required)
        self.spec = spec
        self.many = many

    def decode(self, value: Any, msg: Message, path: str, rec: ShapeRecorder) -> None:
        if self.many:
            if type(value) is not list:
                raise wrong_type(path, "an array of objects", value)
            target = getattr(msg, self.name)
            for index, item in enumerate(value):
                Nested.decode_object(self.spec, item, target.add(), f"{path}/{index}", rec)
        else:
            Nested.decode_object(self.spec, value, getattr(msg, self.name), path, rec)

    def has_value(self, msg: Message) -> bool:
        if self.many:
            return len(getattr(msg, self.name)) > 0
        return bool(msg.HasField(self.name))

    def encode(self, msg: Message, path: str, view: ShapeView | None) -> Any:
        if self.many:
            return [
                Nested.encode_object(self.spec, item, f"{path}/{index}", view)
                for index, item in enumerate(getattr(msg, self.name))
            ]
        return Nested.encode_object(self.spec, getattr(msg, self.name), path, view)


__all__ = [
    "MISSING",
    "Enum",
    "Field",
    "Int",
    "Nested",
    "NumberOrLabel",
    "OptInt",
    "OptStr",
    "Str",
    "StrList",
    "StructField",
    "child",
]
