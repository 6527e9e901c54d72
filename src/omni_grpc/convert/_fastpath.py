"""Fast paths for the common case: reference-form JSON.

The general codec (``_objects``, ``_fields``) handles everything, one field
object at a time. Most traffic, though, is builder-made JSON in reference
form, which needs none of the shape machinery; for it, each object type has
one straight-line function each way:

* a *decoder* turns a payload dict into constructor keyword arguments, or
  returns ``None`` the moment anything is unusual (unknown key, wrong type,
  unknown enum string, out-of-range number, keys out of order), and the caller
  falls back to the general codec. It accepts only what the general codec
  would convert without a hint, so both paths give equal messages (tested).
* an *encoder* turns a message without a shape into the orjson input.

Those functions live in ``_fastpath_generated.py``, written from the
ObjectSpecs of ``_schema.py`` by ``_fastpath_gen.py`` (``python -m
omni_grpc.convert._fastpath_gen``; a test fails while the checked-in file is
stale). This module holds what they share: DECLINE and the checks of JSON
values that need more than a type test; ``_fastpath_tables`` finds the pair
of an object type (it imports the generated module, which imports this one).

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
from omni_grpc.convert._fields import VIEW_DEPTH, canonical_view, struct_view

# decode(payload, twins): ``twins`` collects (path, exact text) hints for the
# caller to store (none today: fidelity's text is a field of its own).
Decoder = Callable[[dict[str, Any], list[tuple[str, str]]], dict[str, Any] | None]
Encoder = Callable[[Any], dict[str, Any]]
INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)
_BIG_INT = re.compile(rb"\d{16}")  # 2**53 has 16 digits
# A number token with a fraction or exponent, as compact JSON writes one.
_FLOAT_TOKEN = re.compile(rb"[:,\[]-?\d+[.eE]")
_NEGATIVE_ZERO = re.compile(rb"[:,\[]-0\.0[,\]}]")
DECLINE: Any = object()  # "the general codec must decide"


def fidelity_plain(value: dict[str, Any]) -> bool:
    """Whether the Struct view alone gives the exact text of an orjson-parsed
    fidelity back; when it does not (key order, integers past 2**53, a value
    deeper than the view), the general codec records what it needs.

    A Struct gives back the same text unless some object's keys are unsorted
    or an integer is past 2**53 (doubles and JavaScript number text agree on
    everything else, -0 aside), so most values are settled by two C-speed
    dumps.
    """
    try:
        plain = orjson.dumps(value)
    except orjson.JSONEncodeError:
        return False
    if plain.count(b"{") + plain.count(b"[") > VIEW_DEPTH and jt.depth_of(value) > VIEW_DEPTH:
        return False
    if _NEGATIVE_ZERO.search(plain):
        return False  # the view holds 0 for it (struct_view), not the dict's -0.0
    if plain == orjson.dumps(value, option=orjson.OPT_SORT_KEYS) and not _BIG_INT.search(plain):
        return True
    # Cached for the sizes that repeat; a large one must not stay pinned.
    return _plain_text(plain) if len(plain) <= _CACHED_TWIN else _plain_uncached(plain)


_CACHED_TWIN = 64 * 1024


@functools.lru_cache(maxsize=1024)
def _plain_text(plain: bytes) -> bool:
    return _plain_uncached(plain)


def _plain_uncached(plain: bytes) -> bool:
    # orjson's own text of a value it parsed reads back as the same value.
    value = orjson.loads(plain)
    return jt.dump_value(value) == jt.dumps(_canonical(value)).decode()


def _canonical(value: Any) -> Any:
    return canonical_view(struct_view(value))


def json_text(value: dict[str, Any]) -> Any:
    """JavaScript's text of an orjson-parsed object, or DECLINE.

    orjson writes integers as JavaScript does, but floats its own way: ``1.0``
    and ``-0.0`` where JavaScript writes ``1`` and ``0`` (a float parsed from
    ``1.0``, or built by Python code), and exponent form where JavaScript
    picks none (``4.5e-6`` for ``0.0000045``). So text with no number token
    holding a fraction or an exponent is final, a C-speed check (a string
    that merely looks like one only costs the slow path); the rest is written
    here.
    """
    try:
        plain = orjson.dumps(value)
    except orjson.JSONEncodeError:
        return DECLINE
    if _FLOAT_TOKEN.search(plain) is None:
        return plain.decode()
    try:
        return jt.dump_value(value)
    except ConversionError:
        return DECLINE
