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

import re
from collections.abc import Callable
from typing import Any

import orjson

from omni_grpc.convert import _jsontext as jt
from omni_grpc.convert._errors import ConversionError
from omni_grpc.convert._fields import exact_hints
from omni_grpc.convert._shape import key_token

# decode(payload, twins): ``twins`` collects the hints for the caller to store,
# at paths relative to the payload: (path, exact text) for a raw value,
# (path, key tokens) for a key list (a fidelity whose keys are not sorted).
Twin = tuple[str, str | list[str]]
Decoder = Callable[[dict[str, Any], list[Twin]], dict[str, Any] | None]
Encoder = Callable[[Any], dict[str, Any]]
INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)
# A number token with a fraction or exponent, as compact JSON writes one.
_FLOAT_TOKEN = re.compile(rb"[:,\[]-?\d+[.eE]")
DECLINE: Any = object()  # "the general codec must decide"


def fidelity_twins(value: dict[str, Any], key: str, twins: list[Twin]) -> bool:
    """Whether the fast path takes this fidelity object: when its Struct
    view gives its text back, keys in any order (OpenAI reasoning's
    ``{"id","encrypted_content"}`` is not sorted). The key list of each
    object whose keys are not sorted then goes to ``twins``: exactly the
    hints the general codec records, from the same ``exact_hints``.

    Anything else declines: a value a double or the view cannot hold
    (integers past 2**53, lone surrogates, nesting below the view) and
    ``-0.0`` (the general codec's view holds 0 for it, the constructor would
    keep the dict's -0.0; a conservative byte test, declining costs speed
    only). The walk visits values, not text, so a long base64 string costs
    one scan for surrogates.
    """
    hints = exact_hints(value, key)
    if hints is None or hints[1]:
        return False
    try:
        if b"-0.0" in orjson.dumps(value):
            return False
    except orjson.JSONEncodeError:
        return False
    twins.extend((at, [key_token(k) for k in keys]) for at, keys in hints[0])
    return True


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
