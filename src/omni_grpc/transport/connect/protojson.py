"""ProtoJSON request bodies parsed as protobuf's ``json_format.Parse`` parses
them, without its cost on long strings.

``json_format`` checks every string field for unpaired surrogates with a
regular expression that runs at about 10 MB/s: a Connect JSON request with
a 60 MiB prompt held the event loop for seconds. Here long string fields
are taken out of the parsed JSON before ``ParseDict`` and set afterwards,
checked by ``str.encode`` (which refuses a lone surrogate at C speed; the
JSON decoder has already joined every valid pair). Everything else,
including every error, is ``json_format``'s own.
"""

from __future__ import annotations

import json
from typing import Any

from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

# Strings shorter than this go through json_format as they are.
LONG_STRING = 4096

Path = tuple[tuple[str, int | str | None], ...]


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """json_format's rule: a key given twice is an error, not the last one winning."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise json_format.ParseError(f"Failed to load JSON: duplicate key {key}.")
        out[key] = value
    return out


def parse(text: str, message: Message, long_string: int = LONG_STRING) -> None:
    """``json_format.Parse(text, message, ignore_unknown_fields=True)``."""
    fill(load(text), message, long_string)


def load(text: str) -> Any:
    """The JSON, as ``json_format.Parse`` loads it (a key given twice refused)."""
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates)
    except json_format.ParseError:
        raise
    except Exception as exc:
        raise json_format.ParseError(f"Failed to load JSON: {exc}.") from exc


def load_bytes(body: bytes | bytearray) -> Any:
    """``load`` of a UTF-8 body (a top-level function: large bodies are
    parsed in another process, transport/large_json.py)."""
    return load(bytes(body).decode("utf-8"))


def fill(tree: Any, message: Message, long_string: int = LONG_STRING) -> None:
    """``json_format.ParseDict(tree, message, ignore_unknown_fields=True)``,
    with long strings set aside and set afterwards."""
    taken: list[tuple[Path, str]] = []
    if isinstance(tree, dict):
        descriptor: Descriptor = message.DESCRIPTOR  # type: ignore[assignment]
        _take_long_strings(tree, descriptor, (), long_string, taken)
    json_format.ParseDict(tree, message, ignore_unknown_fields=True)
    for path, value in taken:
        try:
            if not value.isascii():  # (isascii is O(1); ASCII holds no surrogate)
                value.encode("utf-8")
        except UnicodeEncodeError:
            name = ".".join(str(step[0]) for step in path)
            raise json_format.ParseError(
                f"Failed to parse {name} field: unpaired surrogate."
            ) from None
        _put(message, path, value)


def _field(descriptor: Descriptor, key: str) -> FieldDescriptor | None:
    return descriptor.fields_by_camelcase_name.get(key) or descriptor.fields_by_name.get(key)


def _take_long_strings(
    obj: dict[str, Any],
    descriptor: Descriptor,
    at: Path,
    long_string: int,
    taken: list[tuple[Path, str]],
) -> None:
    """Replaces each long value of a string field under ``obj`` by "" (which
    json_format parses as cheaply as any field), noting where it goes."""
    for key, value in obj.items():
        field = _field(descriptor, key)
        if field is None:
            continue
        name = field.name
        if field.type == FieldDescriptor.TYPE_STRING:
            if isinstance(value, str) and len(value) >= long_string:
                taken.append(((*at, (name, None)), value))
                obj[key] = ""
            elif isinstance(value, list):
                for i, item in enumerate(value):
                    if isinstance(item, str) and len(item) >= long_string:
                        taken.append(((*at, (name, i)), item))
                        value[i] = ""
            continue
        inner = field.message_type
        if inner is None or inner.full_name.startswith("google.protobuf."):
            continue  # scalars; well-known types (Struct's strings are not checked)
        if inner.GetOptions().map_entry:
            strings = FieldDescriptor.TYPE_STRING
            key_type, value_type = (inner.fields_by_name[f].type for f in ("key", "value"))
            if key_type == value_type == strings and isinstance(value, dict):
                for k, item in value.items():
                    if isinstance(item, str) and len(item) >= long_string:
                        taken.append(((*at, (name, str(k))), item))
                        value[k] = ""
            continue
        if isinstance(value, dict) and not field.is_repeated:
            _take_long_strings(value, inner, (*at, (name, None)), long_string, taken)
        elif isinstance(value, list) and field.is_repeated:
            for i, item in enumerate(value):
                if isinstance(item, dict):
                    _take_long_strings(item, inner, (*at, (name, i)), long_string, taken)


def _put(message: Message, path: Path, value: str) -> None:
    target: Any = message
    for name, index in path[:-1]:
        target = getattr(target, name)
        if index is not None:
            target = target[index]
    name, index = path[-1]
    if index is None:
        setattr(target, name, value)
    else:
        getattr(target, name)[index] = value
