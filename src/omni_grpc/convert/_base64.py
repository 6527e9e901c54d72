"""Long base64 strings stored as bytes (``base64_values``) in ``.binpb`` records.

The strings that make provider traces large are base64: OpenAI's
``encrypted_content`` (Fernet tokens, URL-safe alphabet), Anthropic's
``signature`` and Gemini's ``thoughtSignature`` in ``fidelity``, images as
data URLs and inline data. As text they cost 4 bytes for every 3 they stand
for; a record stores each such string of ``PACK_FROM`` characters or more as
a ``Base64Value{data, prefix, url_safe}`` on the envelope. Only text that
comes back exactly is stored this way: an optional data-URL prefix, then
canonical base64 (one alphabet, padded, zero padding bits), which is what
encoding the bytes gives in every language.

Where the text stood, the string holds a *placeholder* naming its entry:
``"\\x00base64:<index>:<crc32 of data, 8 hex digits>"``. It travels with its
value: a program built from the stubs that removes, inserts or reorders
array elements, renames a key or copies a value moves the placeholder as
JavaScript would move the text, so putting the text back wherever a
placeholder stands gives what the same edit gives in JSON. (The pre-release
form kept a JSON Pointer and ``""`` instead; an edit that moved values then
put the text back at the wrong place, silently. Its records are refused.)
A placeholder that names no entry, or whose CRC is not its entry's (copied
from another record), is refused, never guessed. The writer stores nothing
as bytes in a record where a string of those places already starts like a
placeholder, so a placeholder is never a value.

The same steps keep a fidelity that needs ``fidelity_json`` (a key with a
lone surrogate, nesting below the view) from being stored twice: its
``Struct`` view, which repeats every value of that text, is replaced by the
one key ``ELIDED`` (``"\x00fidelity_json": true``), and the reader builds
the view from the text again, then applies any key a stub program set
beside the marker (the text is what docs/lossless.md tells other languages
to read when it is set). A marker without the text is refused.

:func:`pack` is the writer's step (``.binpb`` only: the gRPC API carries the
text), :func:`unpack` the reader's; ``serialize_message`` unpacks a copy, so a
record a Go or Java relay passed on unread still writes its text.
"""

from __future__ import annotations

import binascii
import re
import zlib
from collections.abc import Callable, Iterator

from google.protobuf import struct_pb2

from omni_grpc.convert import _jsontext as jt
from omni_grpc.convert._errors import ConversionError
from omni_grpc.convert._fields import ELIDED, struct_to_python, struct_view
from omni_grpc.convert._shape import child
from omni_grpc_proto.omni.v1.omni_pb2 import Base64Value, OmniMessage

# Below this a Base64Value (placeholder, tags) costs about what the text saves.
PACK_FROM = 128
# The payload arms with a fidelity Struct (and its fidelity_json twin).
FIDELITY_ARMS = ("text", "inline_data", "thinking", "inline_thinking", "tool_call")
# The typed string fields that hold base64 or data URLs, by payload arm.
TYPED_FIELDS = {
    "image_url": ("image_url",),
    "inline_data": ("data",),
    "inline_thinking": ("data",),
    "tool_call_output": ("images",),
}
# Every placeholder starts so; no JSON text a model writes starts with NUL.
MARK = "\x00base64:"
_PLACEHOLDER = re.compile("\x00base64:(0|[1-9][0-9]{0,8}):([0-9a-f]{8})")
_DATA_URL = re.compile(r"data:[^,]{0,200};base64,")
_TO_STANDARD = str.maketrans("-_", "+/")


def placeholder(index: int, data: bytes) -> str:
    return f"{MARK}{index}:{zlib.crc32(data):08x}"


def stored_form(text: str) -> tuple[str, bool, bytes] | None:
    """``(prefix, url_safe, data)`` when ``text`` is a prefix (a data URL's
    ``data:...;base64,``, or none) then the canonical base64 of ``data`` in
    one alphabet, so writing them back gives ``text`` exactly; else None."""
    if len(text) < PACK_FROM or not text.isascii():
        return None
    prefix = ""
    if text.startswith("data:"):
        found = _DATA_URL.match(text)
        if found is None:
            return None
        prefix = found.group()
    body = text[len(prefix) :]
    if not body or len(body) % 4:
        return None
    url_safe = "-" in body or "_" in body
    try:
        data = binascii.a2b_base64(
            body.translate(_TO_STANDARD) if url_safe else body, strict_mode=True
        )
    except binascii.Error:
        return None
    if _encode(data, url_safe) != body:
        return None
    return prefix, url_safe, data


def canonical_bytes(text: str) -> bytes | None:
    """The bytes ``text`` is the canonical standard base64 of, or None."""
    form = stored_form(text) if len(text) >= PACK_FROM else _short_form(text)
    return form[2] if form is not None and not form[0] and not form[1] else None


def _short_form(text: str) -> tuple[str, bool, bytes] | None:
    if len(text) % 4 or not text.isascii() or "-" in text or "_" in text:
        return None
    try:
        data = binascii.a2b_base64(text, strict_mode=True)
    except binascii.Error:
        return None
    return ("", False, data) if _encode(data, False) == text else None


def _encode(data: bytes, url_safe: bool) -> str:
    text = binascii.b2a_base64(data, newline=False).decode()
    return text.replace("+", "-").replace("/", "_") if url_safe else text


def text_of(hint: Base64Value) -> str:
    return hint.prefix + _encode(hint.data, hint.url_safe)


def _slots(msg: OmniMessage) -> Iterator[tuple[str, str, Callable[[str], None]]]:
    """``(path, text, setter)`` of every string a placeholder may stand in,
    in a fixed order: the typed fields, then fidelity's values (keys sorted,
    lists in order)."""
    arm = msg.WhichOneof("payload")
    if arm is None:
        return
    payload = getattr(msg, arm)
    for name in TYPED_FIELDS.get(arm, ()):
        value = getattr(payload, name)
        if isinstance(value, str):
            yield f"/payload/{name}", value, _field_setter(payload, name)
        else:
            for n, item in enumerate(value):
                yield f"/payload/{name}/{n}", item, _item_setter(value, n)
    if arm in FIDELITY_ARMS and payload.HasField("fidelity"):
        yield from _struct_slots(payload.fidelity, "/payload/fidelity")


def _field_setter(payload: object, name: str) -> Callable[[str], None]:
    return lambda text: setattr(payload, name, text)


def _item_setter(items: object, n: int) -> Callable[[str], None]:
    def put(text: str) -> None:
        items[n] = text  # type: ignore[index]

    return put


def _value_setter(value: struct_pb2.Value) -> Callable[[str], None]:
    return lambda text: setattr(value, "string_value", text)


def _struct_slots(
    struct: struct_pb2.Struct, path: str
) -> Iterator[tuple[str, str, Callable[[str], None]]]:
    for key in sorted(struct.fields):
        yield from _value_slots(struct.fields[key], child(path, key))


def _value_slots(
    value: struct_pb2.Value, path: str
) -> Iterator[tuple[str, str, Callable[[str], None]]]:
    kind = value.WhichOneof("kind")
    if kind == "string_value":
        yield path, value.string_value, _value_setter(value)
    elif kind == "struct_value":
        yield from _struct_slots(value.struct_value, path)
    elif kind == "list_value":
        for n, item in enumerate(value.list_value.values):
            yield from _value_slots(item, f"{path}/{n}")


def _packable(msg: OmniMessage) -> bool:
    arm = msg.WhichOneof("payload")
    if arm in TYPED_FIELDS:
        return True
    if arm not in FIDELITY_ARMS:
        return False
    payload = getattr(msg, arm)
    # With fidelity_json the exact text supplies the values; a placeholder in
    # the Struct would read as an edit of it.
    return payload.HasField("fidelity") and not payload.fidelity_json


def _exact_text(msg: OmniMessage) -> str:
    arm = msg.WhichOneof("payload")
    if arm not in FIDELITY_ARMS:
        return ""
    text: str = getattr(msg, arm).fidelity_json
    return text


def _elide_view(msg: OmniMessage) -> OmniMessage:
    """``msg`` with the fidelity Struct that repeats its ``fidelity_json``
    replaced by the marker; ``msg`` itself when the two disagree (an edit,
    which the Struct must keep) or it holds no Struct."""
    arm = msg.WhichOneof("payload")
    assert arm is not None
    payload = getattr(msg, arm)
    if not payload.HasField("fidelity") or ELIDED in payload.fidelity.fields:
        return msg
    try:
        view = struct_view(jt.loads(jt.canonical(payload.fidelity_json)))
    except ConversionError:
        return msg  # not one JSON value: the reader names it, as it would
    if type(view) is not dict or view != struct_to_python(payload.fidelity):
        return msg
    out = OmniMessage()
    out.CopyFrom(msg)
    fidelity = getattr(out, arm).fidelity
    fidelity.Clear()
    fidelity[ELIDED] = True
    return out


def _restore_view(msg: OmniMessage) -> None:
    """Builds the elided view again from ``fidelity_json``, in place, with
    the keys a program set beside the marker applied over it."""
    arm = msg.WhichOneof("payload")
    assert arm is not None
    payload = getattr(msg, arm)
    fidelity = payload.fidelity
    if not payload.fidelity_json:
        raise ConversionError(
            "fidelity's Struct was left out for fidelity_json, which is empty",
            path="/payload/fidelity",
        )
    try:
        view = struct_view(jt.loads(jt.canonical(payload.fidelity_json)))
    except ConversionError as exc:
        raise ConversionError(f"fidelity_json: {exc.reason}", path="/payload/fidelity") from None
    if type(view) is not dict:
        raise ConversionError("fidelity_json is not a JSON object", path="/payload/fidelity")
    edits = struct_pb2.Struct()
    edits.CopyFrom(fidelity)
    del edits[ELIDED]
    fidelity.Clear()
    fidelity.update(view)
    for key, value in edits.fields.items():
        fidelity.fields[key].CopyFrom(value)


def _elided(msg: OmniMessage) -> bool:
    """Whether the fidelity Struct holds the marker (with or without the
    text: a marker alone is refused, never written as a key)."""
    arm = msg.WhichOneof("payload")
    if arm not in FIDELITY_ARMS:
        return False
    payload = getattr(msg, arm)
    return payload.HasField("fidelity") and ELIDED in payload.fidelity.fields


def pack(msg: OmniMessage) -> OmniMessage:
    """``msg`` with each long base64 string stored as bytes and a view that
    repeats ``fidelity_json`` left out; ``msg`` itself when there is none
    (never changed in place)."""
    if _exact_text(msg):
        return _elide_view(msg)
    if not _packable(msg) or msg.base64_values or msg.ByteSize() < PACK_FROM:
        return msg  # (a record that small holds no string of PACK_FROM characters)
    taken = {raw.path for raw in msg.raw_values}
    wanted = False
    for path, text, _ in _slots(msg):
        if text.startswith(MARK):
            return msg  # a value that looks like a placeholder: keep the record as text
        if not wanted and len(text) >= PACK_FROM and path not in taken:
            wanted = stored_form(text) is not None
    if not wanted:
        return msg
    out = OmniMessage()
    out.CopyFrom(msg)
    for path, text, put in list(_slots(out)):
        if len(text) < PACK_FROM or path in taken:
            continue
        form = stored_form(text)
        if form is not None:
            prefix, url_safe, data = form
            put(placeholder(len(out.base64_values), data))
            out.base64_values.add(data=data, prefix=prefix, url_safe=url_safe)
    return out


def unpack(msg: OmniMessage) -> OmniMessage:
    """``msg`` with the text put back wherever a placeholder stands and the
    ``base64_values`` dropped, and an elided view built again; ``msg``
    itself when it has none of them. An entry no
    placeholder names any more was deleted by an edit, and goes with it."""
    if not msg.base64_values:
        if _elided(msg):
            out = OmniMessage()
            out.CopyFrom(msg)
            _restore_view(out)
            return out
        return msg
    for n, hint in enumerate(msg.base64_values):
        if hint.path:
            raise ConversionError(
                f"base64_values[{n}] has a path ({hint.path!r}): the pre-release form, "
                "whose values a stub edit could move without its hint; write it again from JSON",
                path=hint.path if _is_pointer(hint.path) else "",
            )
    out = OmniMessage()
    out.CopyFrom(msg)
    hints = list(out.base64_values)
    del out.base64_values[:]
    if _elided(out):
        _restore_view(out)
    texts: dict[int, str] = {}
    for path, text, put in list(_slots(out)):
        if not text.startswith(MARK):
            continue
        found = _PLACEHOLDER.fullmatch(text)
        if found is None:
            raise ConversionError("a base64 placeholder that is not well formed", path=path)
        index = int(found.group(1))
        if index >= len(hints):
            raise ConversionError(
                f"a base64 placeholder names entry {index}, the record holds {len(hints)}",
                path=path,
            )
        hint = hints[index]
        if found.group(2) != f"{zlib.crc32(hint.data):08x}":
            raise ConversionError(
                f"a base64 placeholder's CRC is not that of entry {index} "
                "(copied from another record?)",
                path=path,
            )
        if index not in texts:
            texts[index] = text_of(hint)
        put(texts[index])
    return out


def _is_pointer(path: str) -> bool:
    """Whether ``path`` is a well-formed JSON Pointer (RFC 6901: "~" only
    as "~0" or "~1")."""
    return (not path or path.startswith("/")) and re.search("~(?![01])", path) is None
