"""Reading and writing the JsonShape hints while converting one message."""

from __future__ import annotations

from omni_grpc.convert import _jsontext as jt
from omni_grpc_proto.omni.v1 import omni_pb2


def key_token(key: str) -> str:
    """How a key is stored in a shape. Proto strings are UTF-8 and cannot hold
    a lone surrogate, so such a key (or one that starts with NUL, to keep the
    form unambiguous) is stored as NUL + its JSON string literal."""
    if key.startswith("\x00") or jt.has_surrogate(key):
        return "\x00" + jt.string_text(key)
    return key


def key_from_token(token: str) -> str:
    if token.startswith("\x00"):
        key: str = jt.loads(token[1:])
        return key
    return token


def child(path: str, key: str) -> str:
    """The JSON Pointer of ``key`` under ``path`` (RFC 6901 escaping)."""
    key = key_token(key)
    if "~" in key or "/" in key:
        key = key.replace("~", "~0").replace("/", "~1")
    return f"{path}/{key}"


class ShapeRecorder:
    """Collects hints while decoding; empty for reference-form input."""

    __slots__ = ("orders", "raws")

    def __init__(self) -> None:
        self.orders: list[tuple[str, list[str]]] = []
        self.raws: list[tuple[str, str]] = []

    def key_order(self, path: str, keys: list[str]) -> None:
        self.orders.append((path, [key_token(k) for k in keys]))

    def raw(self, path: str, text: str) -> None:
        self.raws.append((path, text))

    def fill(self, shape: omni_pb2.JsonShape) -> None:
        for path, keys in self.orders:
            shape.key_orders.add(path=path, keys=keys)
        for path, text in self.raws:
            shape.raw_values.add(path=path, json=text)


class ShapeView:
    """Hints of one message, indexed by path, for encoding."""

    __slots__ = ("orders", "raws")

    def __init__(self, shape: omni_pb2.JsonShape) -> None:
        self.orders = {o.path: [key_from_token(k) for k in o.keys] for o in shape.key_orders}
        self.raws = {r.path: r.json for r in shape.raw_values}
