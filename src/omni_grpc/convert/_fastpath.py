"""Generated fast paths for the common case: reference-form JSON.

The general codec (``_objects``, ``_fields``) handles everything, one field
object at a time. Most traffic, though, is builder-made JSON in reference
form, which needs none of the shape machinery; for it, this module generates
(once, at import) one straight-line function per object type, the way
dataclasses generate ``__init__``:

* a *decoder* turns a payload dict into constructor keyword arguments, or
  returns ``None`` the moment anything is unusual (unknown key, wrong type,
  unknown enum string, out-of-range number, keys out of order), and the caller
  falls back to the general codec. It accepts only what the general codec
  would convert without a hint, so both paths give equal messages (tested).
* an *encoder* turns a message without a shape into the orjson input.

Input parsed by orjson never holds lone surrogates (orjson refuses them), so
the decoders skip that check; callers pass only orjson-parsed input.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any

import orjson

from omni_grpc.convert import _jsontext as jt
from omni_grpc.convert._errors import ConversionError
from omni_grpc.convert._fields import (
    MISSING,
    VIEW_DEPTH,
    Enum,
    Fidelity,
    Field,
    Int,
    JsonText,
    Nested,
    NumberOrLabel,
    OptInt,
    OptStr,
    Str,
    StrList,
    canonical_view,
    struct_view,
)
from omni_grpc.convert._schema import ObjectSpec

Decoder = Callable[[dict[str, Any], list[tuple[str, str]]], dict[str, Any] | None]
Encoder = Callable[[Any], dict[str, Any]]
_INT64_MAX = 2**63 - 1
_INT64_MIN = -(2**63)


def _decode_source(spec: ObjectSpec, env: dict[str, Any]) -> str:
    """Source of ``decode(obj, twins)``; ``twins`` collects (path, exact text)
    hints (none today: fidelity's text is a field of its own)."""
    # Keys must come in reference order: each branch knows its position, so
    # order is checked as keys arrive ("last"), and required keys are counted.
    lines = [
        "def decode(obj, twins):",
        "    kw = {}",
        "    last = -1",
        "    required = 0",
        "    for key, value in obj.items():",
    ]
    if spec.type_text is not None:
        lines += [
            "        if key == 'type':",
            "            if last >= 0: return None",
            "            last = 0",
            "            continue",
        ]
    for index, field in enumerate(spec.fields):
        position = index + 1
        lines.append(f"        if key == {field.key!r}:")
        lines.append(f"            if last >= {position}: return None")
        lines.append(f"            last = {position}")
        if field.required:
            lines.append("            required += 1")
        lines += [f"            {line}" for line in _decode_field(field, index, env)]
        lines.append("            continue")
    lines.append("        return None")
    count = sum(1 for f in spec.fields if f.required)
    if count:
        lines.append(f"    if required != {count}: return None")
    lines.append("    return kw")
    return "\n".join(lines)


def _decode_field(field: Field, index: int, env: dict[str, Any]) -> list[str]:
    name = field.name
    if isinstance(field, Enum):
        env[f"E{index}"] = field.to_number
        return [
            "if type(value) is not str: return None",
            f"number = E{index}.get(value)",
            "if number is None: return None",
            f"kw[{name!r}] = number",
        ]
    if isinstance(field, NumberOrLabel):
        return [
            "kind = type(value)",
            f"if kind is str: kw[{field.label_name!r}] = value",
            "elif kind is int and INT64_MIN <= value <= INT64_MAX:",
            f"    kw[{field.number_name!r}] = value",
            "else: return None",
        ]
    if isinstance(field, (Int, OptInt)):
        return [
            "if type(value) is not int or not INT64_MIN <= value <= INT64_MAX: return None",
            f"kw[{name!r}] = value",
        ]
    if isinstance(field, OptStr) and field.nullable:
        return [
            # null leaves the field unset; only a required key reads that back as null
            f"if value is None: {'continue' if field.required else 'return None'}",
            "if type(value) is not str: return None",
            f"kw[{name!r}] = value",
        ]
    if isinstance(field, Str):  # OptStr included
        return ["if type(value) is not str: return None", f"kw[{name!r}] = value"]
    if isinstance(field, StrList):
        empty_ok = field.required
        return [
            "if type(value) is not list: return None",
            *([] if empty_ok else ["if not value: return None"]),
            "for item in value:",
            "    if type(item) is not str: return None",
            f"kw[{name!r}] = value",
        ]
    if isinstance(field, Fidelity):
        return [
            "if type(value) is not dict: return None",
            "twin = fidelity_twin(value)",
            "if twin is DECLINE: return None",
            f"if twin is not None: kw[{field.json_name!r}] = twin",
            f"kw[{name!r}] = value",
        ]
    if isinstance(field, JsonText):
        return [
            "if type(value) is not dict: return None",
            "text = json_text(value)",
            "if text is DECLINE: return None",
            f"kw[{name!r}] = text",
        ]
    if isinstance(field, Nested):
        env[f"D{index}"] = decoder_for(field.spec)
        if field.many:
            return [
                "if type(value) is not list: return None",
                *([] if field.required else ["if not value: return None"]),
                "items = []",
                "for position, item in enumerate(value):",
                "    if type(item) is not dict: return None",
                "    nested = []",
                f"    sub = D{index}(item, nested)",
                "    if sub is None: return None",
                "    for path, text in nested:",
                f"        twins.append((f'{field.key}/{{position}}/{{path}}', text))",
                "    items.append(sub)",
                f"kw[{name!r}] = items",
            ]
        return [
            "if type(value) is not dict: return None",
            "nested = []",
            f"sub = D{index}(value, nested)",
            "if sub is None: return None",
            "for path, text in nested:",
            f"    twins.append((f'{field.key}/{{path}}', text))",
            # all zeros stays unset, as the general codec leaves it
            f"if any(sub.values()): kw[{name!r}] = sub",
        ]
    raise TypeError(f"no fast path for {type(field).__name__}")


def _encode_source(spec: ObjectSpec, env: dict[str, Any]) -> str:
    lines = ["def encode(msg):"]
    lines.append(f"    out = {{'type': {spec.type_text!r}}}" if spec.type_text else "    out = {}")
    for index, field in enumerate(spec.fields):
        lines += [f"    {line}" for line in _encode_field(field, index, env)]
    lines.append("    return out")
    return "\n".join(lines)


def _encode_field(field: Field, index: int, env: dict[str, Any]) -> list[str]:
    key, name = field.key, field.name
    if isinstance(field, Enum):
        env[f"T{index}"] = field.to_text
        return [
            f"value = msg.{name}",
            "if value:",
            f"    text = T{index}.get(value)",
            # a number from a newer schema is written as a JSON number
            f"    out[{key!r}] = value if text is None else text",
        ]
    if isinstance(field, NumberOrLabel):
        return [
            f"arm = msg.WhichOneof({field.oneof!r})",
            f"if arm is not None: out[{key!r}] = getattr(msg, arm)",
        ]
    if isinstance(field, OptStr) and field.nullable and field.required:
        return [f"out[{key!r}] = msg.{name} if msg.HasField({name!r}) else None"]
    if isinstance(field, (OptStr, OptInt)):
        return [f"if msg.HasField({name!r}): out[{key!r}] = msg.{name}"]
    if isinstance(field, (Str, Int)):
        if field.required:
            return [f"out[{key!r}] = msg.{name}"]
        return [f"value = msg.{name}", f"if value: out[{key!r}] = value"]
    if isinstance(field, StrList):
        if field.required:
            return [f"out[{key!r}] = list(msg.{name})"]
        return [f"if msg.{name}: out[{key!r}] = list(msg.{name})"]
    if isinstance(field, (Fidelity, JsonText)):
        env[f"S{index}"] = field
        return [
            f"value = S{index}.encode(msg, '', None)",
            f"if value is not MISSING: out[{key!r}] = value",
        ]
    if isinstance(field, Nested):
        env[f"N{index}"] = encoder_for(field.spec)
        if field.many:
            return [
                f"if {field.required} or msg.{name}:",
                f"    out[{key!r}] = [N{index}(item) for item in msg.{name}]",
            ]
        return [f"out[{key!r}] = N{index}(msg.{name})"]
    raise TypeError(f"no fast path for {type(field).__name__}")


_BIG_INT = re.compile(rb"\d{16}")  # 2**53 has 16 digits
_EXPONENT = re.compile(rb"\d[eE]")
DECLINE: Any = object()  # "the general codec must decide"


def fidelity_twin(value: dict[str, Any]) -> Any:
    """The exact text fidelity needs beside its Struct view, for orjson-parsed
    input: None when the view alone gives the bytes back, DECLINE when the
    general codec must decide (a value deeper than the view).

    A Struct gives back the same text unless some object's keys are unsorted
    or an integer is past 2**53 (doubles and JavaScript number text agree on
    everything else), so most values are settled by two C-speed dumps.
    """
    try:
        plain = orjson.dumps(value)
    except orjson.JSONEncodeError:
        return DECLINE
    if plain.count(b"{") + plain.count(b"[") > VIEW_DEPTH and jt.depth_of(value) > VIEW_DEPTH:
        return DECLINE
    if plain == orjson.dumps(value, option=orjson.OPT_SORT_KEYS) and not _BIG_INT.search(plain):
        return None
    # Cached for the sizes that repeat; a large one must not stay pinned.
    return _twin_of_text(plain) if len(plain) <= _CACHED_TWIN else _twin_uncached(plain)


_CACHED_TWIN = 64 * 1024


@functools.lru_cache(maxsize=1024)
def _twin_of_text(plain: bytes) -> str | None:
    return _twin_uncached(plain)


def _twin_uncached(plain: bytes) -> str | None:
    # orjson's own text of a value it parsed reads back as the same value.
    value = orjson.loads(plain)
    exact = jt.dump_value(value)
    viewed = jt.dumps(_canonical(value)).decode()
    return None if exact == viewed else exact


def _canonical(value: Any) -> Any:
    return canonical_view(struct_view(value))


def json_text(value: dict[str, Any]) -> Any:
    """JavaScript's text of an orjson-parsed object, or DECLINE.

    For values orjson parsed from JavaScript's text (no lone surrogates, no
    integers past 64 bits, no float written as an integer), orjson writes the
    same text, except where it picks exponent form and JavaScript does not
    (``4.5e-6`` for ``0.0000045``). So text without a digit followed by an
    exponent is final, a C-speed check; the rest is written here.
    """
    try:
        plain = orjson.dumps(value)
    except orjson.JSONEncodeError:
        return DECLINE
    if _EXPONENT.search(plain) is None:
        return plain.decode()
    try:
        return jt.dump_value(value)
    except ConversionError:
        return DECLINE


_decoders: dict[int, Decoder] = {}
_encoders: dict[int, Encoder] = {}


def _compile(source: str, env: dict[str, Any], name: str) -> Any:
    env.update(
        INT64_MIN=_INT64_MIN,
        INT64_MAX=_INT64_MAX,
        fidelity_twin=fidelity_twin,
        json_text=json_text,
        DECLINE=DECLINE,
        MISSING=MISSING,
    )
    exec(compile(source, f"<omni_grpc fast path: {name}>", "exec"), env)
    return env[name]


def decoder_for(spec: ObjectSpec) -> Decoder:
    found = _decoders.get(id(spec))
    if found is None:
        env: dict[str, Any] = {}
        found = _decoders[id(spec)] = _compile(_decode_source(spec, env), env, "decode")
    return found


def encoder_for(spec: ObjectSpec) -> Encoder:
    found = _encoders.get(id(spec))
    if found is None:
        env: dict[str, Any] = {}
        found = _encoders[id(spec)] = _compile(_encode_source(spec, env), env, "encode")
    return found
