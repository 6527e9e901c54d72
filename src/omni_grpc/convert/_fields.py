"""Field codecs: how one JSON key maps onto one protobuf field.

Every codec decodes a JSON value into its typed field, recording the exact
text as a hint when the typed field can only approximate it (the *view*), and
encodes the typed field back, preferring that exact text while it still
decodes to the field's current value, so an edited field never loses to a
stale hint. A key whose field is empty is written only while a hint says the
source had it that way (``"images":[]``): clearing a field gives absence.
"""

from __future__ import annotations

import abc
import math
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
_INT32_MIN = -(2**31)
_INT32_MAX = 2**31 - 1
# Levels of nesting the Struct view of fidelity holds (the fidelity object is
# level 1). Each JSON level costs three protobuf levels inside a Struct, and
# upb and Java stop decoding at 100; 16 keeps any message well inside that.
VIEW_DEPTH = 16
# The one key of a fidelity Struct whose view a .binpb record leaves out for
# fidelity_json (convert/_base64.py). A fidelity that really has a key of
# that name is kept in fidelity_json too, so the marker never stands alone.
ELIDED = "\x00fidelity_json"


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


def _located(exc: ConversionError, path: str) -> ConversionError:
    return ConversionError(exc.reason, path=path + exc.path)


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
        """Whether the key is written when no hint says otherwise."""
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
        if not self.present(msg):
            return MISSING
        return self.encode_typed(msg)

    def raw_matches(self, raw: str, msg: Message) -> bool:
        try:
            return bool(self.view_of(jt.loads(raw)) == self.typed(msg))
        except (ConversionError, TypeError, ValueError, OverflowError):
            return False

    def typed(self, msg: Message) -> Any:
        return getattr(msg, self.name)

    def view_of(self, value: Any) -> Any:
        return value

    def encode_typed(self, msg: Message) -> Any:
        return getattr(msg, self.name)


class Str(Field):
    """A string; lone surrogates are kept in a hint, U+FFFD in the field."""

    __slots__ = ()

    def decode(self, value: Any, msg: Message, path: str, rec: ShapeRecorder) -> None:
        if type(value) is not str:
            raise wrong_type(path, "a string", value)
        if jt.has_surrogate(value):
            rec.raw_value(path, value)
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
            msg.ClearField(self.name)  # null: unset
            if not self.required:
                rec.raw(path, "null")  # an optional key that held null keeps it
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
    """A string union as a proto enum. An unknown string keeps its text in a
    hint; a number the schema does not know (from a producer built on a newer
    schema) is written as a JSON number, as protobuf's JSON mapping does, and
    read back as that number."""

    __slots__ = ("to_number", "to_text")

    def __init__(self, key: str, values: dict[str, int], name: str | None = None) -> None:
        super().__init__(key, name)
        self.to_number = values
        self.to_text = {number: text for text, number in values.items()}

    def decode(self, value: Any, msg: Message, path: str, rec: ShapeRecorder) -> None:
        kind = type(value)
        if kind is str:
            number = self.to_number.get(value)
            if number is None:
                rec.raw_value(path, value)
                number = 0
        elif kind is int or kind is float:
            number = self._number_view(value)
            if number in self.to_text or number == 0 or number != value:
                rec.raw_value(path, value)  # written as a string otherwise
        else:
            raise wrong_type(path, "a string", value)
        setattr(msg, self.name, number)

    @staticmethod
    def _number_view(value: Any) -> int:
        if type(value) is float and value.is_integer():
            value = int(value)
        if type(value) is int and _INT32_MIN <= value <= _INT32_MAX:
            return int(value)
        return 0

    def view_of(self, value: Any) -> Any:
        kind = type(value)
        if kind is str:
            return self.to_number.get(value, 0)
        if kind is int or kind is float:
            return self._number_view(value)
        return MISSING

    def encode_typed(self, msg: Message) -> Any:
        number = getattr(msg, self.name)
        text = self.to_text.get(number)
        if text is not None:
            return text
        return int(number) if number else MISSING

    def unknown_number(self, msg: Message) -> int | None:
        """The field's number when the schema has no name for it."""
        number = int(getattr(msg, self.name))
        return number if number and number not in self.to_text else None


def _int_view(value: Any) -> int:
    if type(value) is int:
        return value if _INT64_MIN <= value <= _INT64_MAX else 0
    if not math.isfinite(value):
        raise ConversionError(f"{value} is not a JSON number")
    if value.is_integer() and abs(value) < 1e21:
        # The integer JavaScript writes for it (4.4641062880545424e16 is
        # written 44641062880545420): the field then holds what the text says.
        written = int(jt.js_number(value))
        return written if _INT64_MIN <= written <= _INT64_MAX else 0
    truncated = int(value)
    return truncated if _INT64_MIN <= truncated <= _INT64_MAX else 0


class Int(Field):
    """A JavaScript number held in an int64; other numbers keep their text."""

    __slots__ = ()

    def decode(self, value: Any, msg: Message, path: str, rec: ShapeRecorder) -> None:
        kind = type(value)
        if kind is not int and kind is not float:
            raise wrong_type(path, "a number", value)
        try:
            number = _int_view(value)
            # A hint only when the field's own text differs: 1.0 and -0 are
            # written 1 and 0 by JavaScript, which is what the field writes,
            # and a hint the next parse would not make breaks proto identity.
            if jt.js_number(value) != str(number) if kind is float else number != value:
                rec.raw_value(path, value)
        except ConversionError as exc:
            raise _located(exc, path) from None
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
    """An array of strings; optional ones are written only when non-empty (or
    when a hint says the source had ``[]``)."""

    __slots__ = ()

    def decode(self, value: Any, msg: Message, path: str, rec: ShapeRecorder) -> None:
        if type(value) is not list:
            raise wrong_type(path, "an array of strings", value)
        target = getattr(msg, self.name)
        for index, item in enumerate(value):
            if type(item) is not str:
                raise wrong_type(f"{path}/{index}", "a string", item)
            if jt.has_surrogate(item):
                rec.raw_value(f"{path}/{index}", item)
                item = jt.scrub_surrogates(item)
            target.append(item)
        if not value and not self.required:
            rec.raw(path, "[]")

    def has_value(self, msg: Message) -> bool:
        return len(getattr(msg, self.name)) > 0

    def typed(self, msg: Message) -> Any:
        return list(getattr(msg, self.name))

    def view_of(self, value: Any) -> Any:
        return [] if value == [] else MISSING  # only "[]" is a hint for the list itself

    def encode(self, msg: Message, path: str, view: ShapeView | None) -> Any:
        items: list[Any] = list(getattr(msg, self.name))
        if not items:
            if view is not None and view.raws.get(path) == "[]":
                return []
            return [] if self.required else MISSING
        if view is not None and view.raws:
            self._exact_items(items, path, view)
        return items

    @staticmethod
    def _exact_items(items: list[Any], path: str, view: ShapeView) -> None:
        """Puts back the exact text of items that had lone surrogates. Matched
        by value, not index, so inserting an item (a new origin hop in front)
        keeps every other item's text."""
        prefix = path + "/"
        pool: dict[str, list[str]] = {}
        indexed = []
        for hint_path, raw in view.raws.items():
            rest = hint_path[len(prefix) :] if hint_path.startswith(prefix) else ""
            if rest.isdigit():
                indexed.append((int(rest), raw))
        for _, raw in sorted(indexed):
            try:
                value = jt.loads(raw)
            except ConversionError:
                continue
            if type(value) is str:
                pool.setdefault(jt.scrub_surrogates(value), []).append(raw)
        for index, item in enumerate(items):
            texts = pool.get(item)
            if texts:
                items[index] = jt.Fragment(texts.pop(0))


# ---- fidelity: a Struct view beside the exact text ---------------------------


def struct_view(value: Any, level: int = 1) -> Any:
    """What the Struct view holds of ``value`` found at nesting ``level``:
    doubles, UTF-8, and nothing below VIEW_DEPTH (null there)."""
    kind = type(value)
    if kind is dict or kind is list:
        if level > VIEW_DEPTH:
            return None
        if kind is dict:
            if any(type(k) is not str for k in value):
                raise ConversionError("an object key is not a string")
            return {jt.scrub_surrogates(k): struct_view(v, level + 1) for k, v in value.items()}
        return [struct_view(v, level + 1) for v in value]
    if kind is int:
        try:
            return float(value)
        except OverflowError:
            raise ConversionError("a number is outside the range of a double") from None
    if kind is float:
        if not math.isfinite(value):
            raise ConversionError(f"{value} is not a JSON number")
        # -0.0 + 0.0 is 0.0: JavaScript writes -0 as 0, so the view holds 0,
        # which the next parse of that text gives too.
        return value + 0.0
    if kind is str:
        return jt.scrub_surrogates(value)
    if value is None or kind is bool:
        return value
    raise ConversionError(f"{kind.__name__} is not a JSON value")


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


def canonical_view(value: Any) -> Any:
    """Struct content as JavaScript would write it: sorted keys (a Struct
    has no order), integral doubles as integers."""
    kind = type(value)
    if kind is dict:
        return {k: canonical_view(value[k]) for k in sorted(value)}
    if kind is list:
        return [canonical_view(v) for v in value]
    if kind is float:
        return jt.Fragment(jt.js_number(value))
    return value


def _merge(exact: Any, current: Any, level: int) -> Any:
    """``current`` (the Struct) written with the bytes of ``exact`` (the text)
    wherever the two agree, so an edit changes only the edited part."""
    if struct_view(exact, level) == current:
        return jt.Fragment(jt.dump_value(exact))
    if type(exact) is dict and type(current) is dict:
        # Keys that differ only in lone surrogates ("k\ud800", "k\udc00",
        # "k\ufffd") are one key in the Struct, holding the last one's value.
        # While it still does, each keeps its own text; an edit or removal of
        # it cannot say which of them it meant, so it is refused, never
        # applied to one of them with the others dropped.
        groups: dict[str, list[str]] = {}
        for key in exact:
            groups.setdefault(jt.scrub_surrogates(key), []).append(key)
        out: dict[str, Any] = {}
        seen = set()
        for key, item in exact.items():
            viewed = jt.scrub_surrogates(key)
            group = groups[viewed]
            if len(group) > 1:
                if (
                    viewed not in current
                    or struct_view(exact[group[-1]], level + 1) != current[viewed]
                ):
                    raise ConversionError(
                        f"the Struct's key {jt.string_text(viewed)} stands for "
                        f"{len(group)} keys of the exact text "
                        f"({', '.join(jt.string_text(k) for k in group)}) and was edited "
                        "or removed: which one the edit meant is unknown"
                    )
                seen.add(viewed)
                out[key] = jt.Fragment(jt.dump_value(item))
            elif viewed in current and viewed not in seen:
                seen.add(viewed)
                out[key] = _merge(item, current[viewed], level + 1)
        for key in sorted(current):
            if key not in seen:
                out[key] = canonical_view(current[key])
        if any(jt.has_surrogate(key) for key in out):
            return jt.render_object(out)
        return out
    if type(exact) is list and type(current) is list and len(exact) == len(current):
        return [_merge(e, c, level + 1) for e, c in zip(exact, current, strict=True)]
    return canonical_view(current)


def exact_hints(
    value: dict[str, Any], path: str
) -> tuple[list[tuple[str, list[str]]], list[tuple[str, Any]]] | None:
    """What the Struct view of ``value`` lacks, as envelope hints: the key
    list of each object whose keys are not sorted, and the value of each
    number a double does not write back (integers past 2**53) and each string
    with a lone surrogate. None when hints cannot say it (a key with a lone
    surrogate, which the view's keys cannot hold apart; nesting below the
    view): then the whole exact text is kept in ``<name>_json``."""
    if ELIDED in value:
        return None  # a real key of the marker's name: the text says it, never the marker
    orders: list[tuple[str, list[str]]] = []
    raws: list[tuple[str, Any]] = []
    stack: list[tuple[Any, str, int]] = [(value, path, 1)]
    while stack:
        item, at, level = stack.pop()
        kind = type(item)
        if kind is dict or kind is list:
            if level > VIEW_DEPTH:
                return None
            if kind is dict:
                keys = list(item)
                if any(jt.has_surrogate(key) for key in keys):
                    return None
                if keys != sorted(keys):
                    orders.append((at, keys))
                stack.extend((item[key], child(at, key), level + 1) for key in reversed(keys))
            else:
                stack.extend(
                    (sub, f"{at}/{n}", level + 1) for n, sub in reversed(list(enumerate(item)))
                )
        elif kind is int:
            if jt.js_number(float(item)) != str(item):
                raws.append((at, item))
        elif kind is str and jt.has_surrogate(item):
            raws.append((at, item))
    return orders, raws


def _hinted_view(value: Any, path: str, view: ShapeView, level: int) -> Any:
    """The Struct content written with the envelope hints under ``path``: a
    raw value while it still reads as the view's current value, and each
    object's listed keys first, in their order. Keys not listed (set since,
    say in Go) follow in sorted order: appended, as JavaScript's assignment
    appends, in the one order a Struct can give."""
    raw = view.raws.get(path)
    if raw is not None:
        try:
            if struct_view(jt.loads(raw), level) == value:
                return jt.Fragment(raw)
        except ConversionError:
            pass  # a hint that does not read as the value is stale
    kind = type(value)
    if kind is dict:
        order = view.orders.get(path)
        if order is None:
            keys = sorted(value)
        else:
            listed = [key for key in order if key in value]
            keys = listed + sorted(set(value).difference(listed))
        return {key: _hinted_view(value[key], child(path, key), view, level + 1) for key in keys}
    if kind is list:
        return [_hinted_view(v, f"{path}/{n}", view, level + 1) for n, v in enumerate(value)]
    if kind is float:
        return jt.Fragment(jt.js_number(value))
    return value


class Fidelity(Field):
    """Opaque provider data: a ``google.protobuf.Struct`` view, which other
    languages read and edit natively, plus ``<name>_json``, its exact text,
    whenever the view alone would not give the same bytes back (key order,
    integers past 2**53, lone surrogates, nesting below the view).

    The Struct says whether fidelity is there and what it holds; the text
    supplies bytes and key order for every part the Struct still agrees with.
    """

    __slots__ = ("json_name",)

    def __init__(self, key: str = "fidelity") -> None:
        super().__init__(key)
        self.json_name = f"{key}_json"

    def decode(self, value: Any, msg: Message, path: str, rec: ShapeRecorder) -> None:
        if type(value) is not dict:
            raise wrong_type(path, "an object", value)
        try:
            viewed = struct_view(value)
            exact = jt.dump_value(value)
            plain = jt.dumps(canonical_view(viewed)).decode()
        except ConversionError as exc:
            raise _located(exc, path) from None
        target = getattr(msg, self.name)
        target.SetInParent()  # {} is a value too
        target.update(viewed)
        if exact != plain or ELIDED in value:
            hints = exact_hints(value, path)
            if hints is None:
                setattr(msg, self.json_name, exact)
            else:
                orders, raws = hints
                for at, keys in orders:
                    rec.key_order(at, keys)
                for at, item in raws:
                    rec.raw_value(at, item)

    def has_value(self, msg: Message) -> bool:
        return bool(msg.HasField(self.name))

    def encode(self, msg: Message, path: str, view: ShapeView | None) -> Any:
        if not msg.HasField(self.name):
            return MISSING  # cleared: a leftover text alone is stale
        try:
            current = struct_to_python(getattr(msg, self.name))
            text = getattr(msg, self.json_name)
            if not text:
                if view is None:
                    return canonical_view(current)
                return _hinted_view(current, path, view, 1)
            exact = jt.loads(jt.canonical(text))
        except ConversionError as exc:
            raise ConversionError(f"{self.json_name}: {exc.reason}", path=path) from None
        if type(exact) is not dict:
            raise ConversionError(f"{self.json_name} is not a JSON object", path=path)
        try:
            return _merge(exact, current, 1)
        except ConversionError as exc:
            raise _located(exc, path) from None


class JsonText(Field):
    """A JSON object carried as its exact text (``ToolDefinition.parameters``):
    any key order, number text and depth survive, and it is stored once."""

    __slots__ = ()

    def decode(self, value: Any, msg: Message, path: str, rec: ShapeRecorder) -> None:
        if type(value) is not dict:
            raise wrong_type(path, "an object", value)
        try:
            setattr(msg, self.name, jt.dump_value(value))
        except ConversionError as exc:
            raise _located(exc, path) from None

    def encode(self, msg: Message, path: str, view: ShapeView | None) -> Any:
        text = getattr(msg, self.name)
        if not text:
            return MISSING
        try:
            exact = jt.canonical(text)
        except ConversionError as exc:
            raise ConversionError(f"not JSON text: {exc.reason}", path=path) from None
        if not exact.startswith("{"):
            raise ConversionError("expected the text of a JSON object", path=path)
        return jt.Fragment(exact)


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
            if not value and not self.required:
                rec.raw(path, "[]")
        else:
            Nested.decode_object(self.spec, value, getattr(msg, self.name), path, rec)
            if getattr(msg, self.name).ByteSize() == 0:
                # All zeros: proto3 cannot tell set-but-empty from unset, and
                # unset is what other languages build (and what encodes the same).
                msg.ClearField(self.name)

    def has_value(self, msg: Message) -> bool:
        if self.many:
            return len(getattr(msg, self.name)) > 0
        return bool(msg.HasField(self.name))

    def encode(self, msg: Message, path: str, view: ShapeView | None) -> Any:
        if self.many:
            items = getattr(msg, self.name)
            if not items and not self.required:
                return [] if view is not None and view.raws.get(path) == "[]" else MISSING
            return [
                Nested.encode_object(self.spec, item, f"{path}/{index}", view)
                for index, item in enumerate(items)
            ]
        return Nested.encode_object(self.spec, getattr(msg, self.name), path, view)


__all__ = [
    "ELIDED",
    "MISSING",
    "VIEW_DEPTH",
    "Enum",
    "Fidelity",
    "Field",
    "Int",
    "JsonText",
    "Nested",
    "NumberOrLabel",
    "OptInt",
    "OptStr",
    "Str",
    "StrList",
    "child",
]
