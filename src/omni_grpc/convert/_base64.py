"""Base64 strings of ``fidelity`` stored as bytes (``base64_values``).

The strings that make provider traces large are base64 in a ``fidelity``
Struct: OpenAI reasoning's ``encrypted_content``, Anthropic's ``signature``.
As text they cost 4 bytes for every 3 they stand for; a ``.binpb`` record
stores such a string as a ``Base64Value{path, data}`` on the envelope and ""
in its place in the Struct. Only text that comes back exactly is stored
this way: canonical base64 (standard alphabet, padded, zero padding bits),
which is what encoding the bytes gives in every language, so a reader built
from the generated stubs alone gets the text back with its standard base64
encoder, and nothing else is ever rewritten.

:func:`pack` is the writer's step (``.binpb`` only: the gRPC API carries the
Struct as is), :func:`unpack` the reader's; ``serialize_message`` unpacks a
copy, so a record a Go or Java relay passed on unread still writes its text.
A hint is used only while the Struct still holds "" at its path: an edit of
that value (or removing it) wins, and the hint is dropped.
"""

from __future__ import annotations

import binascii

from google.protobuf import struct_pb2

from omni_grpc.convert._shape import child
from omni_grpc_proto.omni.v1.omni_pb2 import OmniMessage

# Below this a Base64Value (path, tags) costs about what the text saves.
PACK_FROM = 128
# The payload arms with a fidelity Struct (and its fidelity_json twin).
FIDELITY_ARMS = ("text", "inline_data", "thinking", "inline_thinking", "tool_call")


def canonical_bytes(text: str) -> bytes | None:
    """The bytes ``text`` is the canonical base64 of, or None: only when
    encoding them gives ``text`` back exactly."""
    if len(text) % 4 or not text.isascii():
        return None
    try:
        data = binascii.a2b_base64(text, strict_mode=True)
    except binascii.Error:
        return None
    return data if binascii.b2a_base64(data, newline=False).decode() == text else None


def pack(msg: OmniMessage) -> OmniMessage:
    """``msg`` with each long canonical base64 string of its fidelity stored
    as bytes; ``msg`` itself when there is none (never changed in place)."""
    arm = msg.WhichOneof("payload")
    if arm not in FIDELITY_ARMS:
        return msg
    payload = getattr(msg, arm)
    if not payload.HasField("fidelity") or payload.fidelity_json:
        # The exact text supplies the bytes there; a "" in the Struct would
        # read as an edit of it.
        return msg
    taken = {raw.path for raw in msg.raw_values} | {b.path for b in msg.base64_values}
    found: list[tuple[str, bytes]] = []
    _collect(payload.fidelity, "/payload/fidelity", taken, found)
    if not found:
        return msg
    out = OmniMessage()
    out.CopyFrom(msg)
    fidelity = getattr(out, arm).fidelity
    for path, data in found:
        value = _value_at(fidelity, path)
        if value is not None:  # found by the same walk: always there
            value.string_value = ""
            out.base64_values.add(path=path, data=data)
    return out


def _collect(
    struct: struct_pb2.Struct, path: str, taken: set[str], found: list[tuple[str, bytes]]
) -> None:
    for key in sorted(struct.fields):
        if key.startswith("\x00"):
            continue  # its pointer would name a key token, not this key
        _collect_value(struct.fields[key], child(path, key), taken, found)


def _collect_value(
    value: struct_pb2.Value, path: str, taken: set[str], found: list[tuple[str, bytes]]
) -> None:
    kind = value.WhichOneof("kind")
    if kind == "string_value":
        text = value.string_value
        if len(text) >= PACK_FROM and path not in taken:
            data = canonical_bytes(text)
            if data is not None:
                found.append((path, data))
    elif kind == "struct_value":
        _collect(value.struct_value, path, taken, found)
    elif kind == "list_value":
        for n, item in enumerate(value.list_value.values):
            _collect_value(item, f"{path}/{n}", taken, found)


def _value_at(fidelity: struct_pb2.Struct, path: str) -> struct_pb2.Value | None:
    """The Struct value a ``/payload/fidelity/...`` pointer names, or None."""
    prefix = "/payload/fidelity/"
    if not path.startswith(prefix):
        return None
    node: struct_pb2.Struct | struct_pb2.ListValue = fidelity
    value: struct_pb2.Value | None = None
    for part in path[len(prefix) :].split("/"):
        token = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, struct_pb2.Struct):
            if token not in node.fields:
                return None
            value = node.fields[token]
        else:
            if not token.isdigit() or (len(token) > 1 and token[0] == "0"):
                return None
            index = int(token)
            if index >= len(node.values):
                return None
            value = node.values[index]
        kind = value.WhichOneof("kind")
        if kind == "struct_value":
            node = value.struct_value
        elif kind == "list_value":
            node = value.list_value
        else:
            node = struct_pb2.ListValue()  # a scalar: any further part finds nothing
    return value


def unpack(msg: OmniMessage) -> OmniMessage:
    """``msg`` with every ``base64_values`` hint put back as the text it
    stands for where the Struct still holds "" there, and the hints dropped;
    ``msg`` itself when it has none."""
    if not msg.base64_values:
        return msg
    out = OmniMessage()
    out.CopyFrom(msg)
    hints = list(out.base64_values)
    del out.base64_values[:]
    arm = out.WhichOneof("payload")
    if arm not in FIDELITY_ARMS or not getattr(out, arm).HasField("fidelity"):
        return out  # stale: the fidelity they belonged to is gone
    fidelity = getattr(out, arm).fidelity
    for hint in hints:
        value = _value_at(fidelity, hint.path)
        if _holds_empty_string(value):  # anything else is an edit, which wins
            assert value is not None
            value.string_value = binascii.b2a_base64(hint.data, newline=False).decode()
    return out


def _holds_empty_string(value: struct_pb2.Value | None) -> bool:
    return (
        value is not None and value.WhichOneof("kind") == "string_value" and not value.string_value
    )
