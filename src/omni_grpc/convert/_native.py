"""The optional native fast path (``_codec``, built from ``_native.c``).

The C code knows nothing of the schema: this module builds its tables from
the same ObjectSpecs the Python codec uses (``_schema``), so there is one
description of the protocol. The native functions mirror the Python fast
path (``_fastpath``) and return ``None`` for anything unusual (hints, fidelity
other than a flat object of strings, booleans and nulls in sorted key order,
unknown kinds or fields, deep values, lone surrogates), and the caller then
runs the Python codec, which stays complete and is the reference.

``OMNI_GRPC_NATIVE=0`` in the environment turns the native path off (the
differential tests run both); without a C compiler at install time the
extension is simply absent.
"""

from __future__ import annotations

import importlib
import os
import warnings
from typing import Any, Protocol

from google.protobuf.descriptor import Descriptor, FieldDescriptor

from omni_grpc.convert import _jsontext as jt
from omni_grpc.convert._fastpath import DECLINE, json_text
from omni_grpc.convert._fields import (
    Enum,
    Fidelity,
    Field,
    Int,
    JsonText,
    Nested,
    NumberOrLabel,
    Str,
    StrList,
)
from omni_grpc.convert._schema import ENVELOPE_TYPE_OF_ARM, PAYLOAD_BY_ARM, ObjectSpec
from omni_grpc_proto.omni.v1 import omni_pb2

# Kind codes shared with _native.c (its enum at the top).
K_STR, K_INT, K_ENUM, K_NUMLABEL, K_STRLIST, K_NESTED, K_JSONTEXT, K_FIDELITY = range(1, 9)
_SCALAR_TYPES = {
    K_STR: FieldDescriptor.TYPE_STRING,
    K_STRLIST: FieldDescriptor.TYPE_STRING,
    K_JSONTEXT: FieldDescriptor.TYPE_STRING,
    K_INT: FieldDescriptor.TYPE_INT64,
    K_ENUM: FieldDescriptor.TYPE_ENUM,
    K_NESTED: FieldDescriptor.TYPE_MESSAGE,
}


class NativeCodec(Protocol):
    def configure(self, *args: Any) -> None: ...
    def encode(self, obj: dict[str, Any]) -> bytes | None: ...
    def encode_with_text(self, obj: dict[str, Any]) -> tuple[bytes, bytes | None] | None: ...
    def decode(self, data: bytes) -> dict[str, Any] | None: ...
    def encode_text(self, data: bytes) -> bytes | None: ...
    def decode_text(self, data: bytes) -> bytes | None: ...
    def jsonl_to_binpb(
        self, data: bytes, pos: int, max_line: int, fidelity_long: int
    ) -> tuple[bytes, int, int]: ...
    def binpb_to_jsonl(self, data: bytes, pos: int, max_frame: int) -> tuple[bytes, int, int]: ...
    def frames_of_arms(
        self, data: bytes, least: bytes, holding: bytes
    ) -> list[tuple[int, int, int]]: ...


def _kind(field: Field) -> int:
    # Order matters: OptStr and OptInt are subclasses of Str and Int.
    for cls, kind in (
        (Enum, K_ENUM),
        (NumberOrLabel, K_NUMLABEL),
        (StrList, K_STRLIST),
        (Nested, K_NESTED),
        (JsonText, K_JSONTEXT),
        (Fidelity, K_FIDELITY),
        (Int, K_INT),
        (Str, K_STR),
    ):
        if isinstance(field, cls):
            return kind
    raise TypeError(f"no native kind for {type(field).__name__}")


class _Tables:
    def __init__(self) -> None:
        self.index: dict[int, int] = {}
        self.rows: list[tuple[str | None, list[tuple[Any, ...]]]] = []

    def table(self, spec: ObjectSpec) -> int:
        found = self.index.get(id(spec))
        if found is not None:
            return found
        number = self.index[id(spec)] = len(self.rows)
        fields: list[tuple[Any, ...]] = []
        self.rows.append((spec.type_text, fields))
        descriptor: Descriptor = spec.message.DESCRIPTOR
        for field in spec.fields:
            fields.append(self._field(field, descriptor))
        # The text path writes fields in the order it reads keys; that is the
        # deterministic wire order only while key order is field-number order.
        # (Fidelity's text twin is never written by it: fidelity declines.)
        numbers = [
            n for row in fields for n in (row[2], row[3] if row[1] == K_NUMLABEL else 0) if n
        ]
        if numbers != sorted(numbers):
            raise TypeError(f"{descriptor.name}: key order is not field-number order")
        return number

    def _field(self, field: Field, descriptor: Descriptor) -> tuple[Any, ...]:
        kind = _kind(field)
        by_name = descriptor.fields_by_name
        number2, sub, many, to_number, to_text = 0, -1, False, {}, {}
        if kind == K_NUMLABEL:
            assert isinstance(field, NumberOrLabel)
            main, label = by_name[field.number_name], by_name[field.label_name]
            _expect(main, FieldDescriptor.TYPE_INT64)
            _expect(label, FieldDescriptor.TYPE_STRING)
            number2 = label.number
        elif kind == K_FIDELITY:
            assert isinstance(field, Fidelity)
            main = by_name[field.name]
            number2 = by_name[field.json_name].number
        else:
            main = by_name[field.name]
            _expect(main, _SCALAR_TYPES[kind])
        if kind == K_ENUM:
            assert isinstance(field, Enum)
            to_number = dict(field.to_number)
            to_text = dict(field.to_text)
        if kind == K_NESTED:
            assert isinstance(field, Nested)
            sub, many = self.table(field.spec), field.many
        repeated = bool(main.is_repeated)
        if repeated != (kind == K_STRLIST or many):
            raise TypeError(f"{descriptor.name}.{main.name}: repeated does not match the spec")
        return (
            field.key,
            kind,
            main.number,
            number2,
            field.required,
            main.has_presence and not repeated,
            bool(getattr(field, "nullable", False)),
            sub,
            many,
            to_number,
            to_text,
        )


def _expect(field: FieldDescriptor, wire_type: int) -> None:
    if field.type != wire_type:
        raise TypeError(
            f"{field.full_name}: type {field.type}, the native tables expect {wire_type}"
        )


def _text_fragment(text: str) -> Any:
    """A ``parameters`` text as the Python codec writes it, or DECLINE (the
    Python codec then names what is wrong)."""
    try:
        exact = jt.canonical(text)
    except Exception:
        return DECLINE
    return jt.Fragment(exact) if exact.startswith("{") else DECLINE


def _configure(module: NativeCodec) -> None:
    tables = _Tables()
    envelope = omni_pb2.OmniMessage.DESCRIPTOR.fields_by_name
    arms = []
    by_type: dict[str, int] = {}
    for arm, spec in PAYLOAD_BY_ARM.items():
        number = envelope[arm].number
        arms.append((number, tables.table(spec), ENVELOPE_TYPE_OF_ARM[arm]))
        if spec.type_text is not None:
            by_type[spec.type_text] = number
    module.configure(
        tables.rows,
        arms,
        (
            envelope["timestamp"].number,
            envelope["origin"].number,
            envelope["key_orders"].number,
            envelope["raw_values"].number,
            envelope["session_meta"].number,
            by_type,
        ),
        json_text,
        _text_fragment,
        DECLINE,
    )


_ENTRY_POINTS = [name for name in NativeCodec.__dict__ if not name.startswith("_")]
# _native.c's SOURCE_VERSION, raised with every change of what a function
# takes or accepts: an extension built from older source may keep every name
# and still take other arguments or decline other records.
SOURCE_VERSION = 3


def _load() -> NativeCodec | None:
    if os.environ.get("OMNI_GRPC_NATIVE", "1") == "0":
        return None
    try:
        module: NativeCodec = importlib.import_module("omni_grpc.convert._codec")
    except ImportError:
        return None  # built without a C compiler: the Python codec does everything
    try:
        missing = [name for name in _ENTRY_POINTS if not hasattr(module, name)]
        if missing:
            # an extension built from older source (a pull without reinstalling)
            raise RuntimeError(
                f"the built extension lacks {', '.join(missing)}: rerun pip install -e ."
            )
        built = getattr(module, "SOURCE_VERSION", None)
        if built != SOURCE_VERSION:
            raise RuntimeError(
                f"the built extension is from other source (version {built}, "
                f"this code expects {SOURCE_VERSION}): rerun pip install -e ."
            )
        _configure(module)
    except (TypeError, ValueError, KeyError, RuntimeError) as exc:
        # A schema the tables cannot describe (or a stale build): the Python
        # codec is complete, so say so and go on without the native path.
        # In CI, tests/test_convert_native.py fails when this happens.
        warnings.warn(f"omni-grpc: native codec disabled: {exc}", RuntimeWarning, stacklevel=2)
        return None
    return module


NATIVE: NativeCodec | None = _load()
