"""Reading and writing the exact-bytes hints (``key_orders``, ``raw_values``)
while converting one message.

Hints come from outside as often as from our own decoder (a Go relay keeps
them, a gRPC client may invent them), so the view checks them as it reads:
a key token must decode, and a raw value must be exactly one JSON value. The
text written is the checked, compact form, never the hint as it came.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from omni_grpc.convert import _jsontext as jt
from omni_grpc.convert._errors import ConversionError


class _KeyOrder(Protocol):
    path: str
    keys: Any


class _RawValue(Protocol):
    path: str
    json: str


class HintedMessage(Protocol):
    """An OmniMessage or ServerEvent: both carry the two hint lists."""

    key_orders: Any
    raw_values: Any


def key_token(key: str) -> str:
    """How a key is stored in a key list. Proto strings are UTF-8 and cannot
    hold a lone surrogate, so such a key (or one that starts with NUL, to keep
    the form unambiguous) is stored as NUL + its JSON string literal."""
    if key.startswith("\x00") or jt.has_surrogate(key):
        return "\x00" + jt.string_text(key)
    return key


def key_from_token(token: str, path: str) -> str:
    if token.startswith("\x00"):
        try:
            key = jt.loads(token[1:])
        except ConversionError:
            key = None
        if type(key) is not str:
            raise ConversionError("a key in the key list is not a JSON string literal", path=path)
        return key
    return token


def child(path: str, key: str) -> str:
    """The JSON Pointer of ``key`` under ``path`` (RFC 6901 escaping)."""
    key = key_token(key)
    if "~" in key or "/" in key:
        key = key.replace("~", "~0").replace("/", "~1")
    return f"{path}/{key}"


def has_hints(msg: HintedMessage) -> bool:
    return len(msg.key_orders) > 0 or len(msg.raw_values) > 0


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

    def raw_value(self, path: str, value: Any) -> None:
        """Records the exact text of a parsed value found at ``path``."""
        try:
            text = jt.dump_value(value)
        except ConversionError as exc:
            raise ConversionError(exc.reason, path=path + exc.path) from None
        self.raws.append((path, text))

    def fill(self, msg: HintedMessage) -> None:
        for path, keys in self.orders:
            msg.key_orders.add(path=path, keys=keys)
        for path, text in self.raws:
            msg.raw_values.add(path=path, json=text)


class ShapeView:
    """Hints of one message, indexed by path and checked, for encoding."""

    __slots__ = ("orders", "raws")

    def __init__(self, orders: Iterable[_KeyOrder], raws: Iterable[_RawValue]) -> None:
        self.orders: dict[str, list[str]] = {}
        for order in orders:
            keys = [key_from_token(token, order.path) for token in order.keys]
            # A key listed twice would be written once anyway; keep the first place.
            self.orders[order.path] = list(dict.fromkeys(keys))
        self.raws: dict[str, str] = {}
        for raw in raws:
            try:
                self.raws[raw.path] = jt.canonical(raw.json)
            except ConversionError as exc:
                raise ConversionError(
                    f"the raw value hint is not one JSON value ({exc.reason})", path=raw.path
                ) from None

    @classmethod
    def of(cls, msg: HintedMessage) -> ShapeView | None:
        if not has_hints(msg):
            return None
        return cls(msg.key_orders, msg.raw_values)

    def parsed(self, path: str) -> Any:
        """The value of the raw hint at ``path`` (MISSING-free: KeyError if none)."""
        return jt.loads(self.raws[path])
