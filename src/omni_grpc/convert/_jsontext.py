"""JSON text exactly as JavaScript's ``JSON.stringify`` writes it.

orjson already matches JavaScript for strings (raw non-ASCII, lowercase
``\\u00xx`` control escapes) and integers. Three things need help:

* floats: JavaScript writes ``1`` for 1.0 and switches to exponent form only
  outside [1e-7, 1e21), so floats are rendered here and embedded as fragments;
* lone surrogates: valid in JavaScript strings (written as ``\\udxxx``), not in
  UTF-8, so orjson refuses them both ways; the stdlib parser accepts them;
* integers of 19+ digits: orjson silently turns some into floats, so such
  input goes through the stdlib parser, which keeps them exact.
"""

from __future__ import annotations

import json
import math
import re
from decimal import Decimal
from typing import Any

import orjson

from omni_grpc.convert._errors import ConversionError

Fragment = orjson.Fragment
_SURROGATE = re.compile("[\ud800-\udfff]")
# A run of 19 digits (int64 bounds have 19) sends the text to the exact
# parser. Mapping every digit to "9" and searching with bytes.find is a
# C-speed scan, several times faster than the equivalent regex.
_DIGITS_TO_NINE = bytes.maketrans(b"012345678", b"999999999")
_NINETEEN_DIGITS = b"9" * 19
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def loads(data: bytes | str) -> Any:
    """Parses JSON text; raises ``ConversionError`` (without location) on bad text."""
    return loads_checked(data)[0]


def loads_checked(data: bytes | str) -> tuple[Any, bool]:
    """Like ``loads``; the flag says orjson parsed it, so no string in it holds
    a lone surrogate and every number is a 64-bit int or a float."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    if raw.translate(_DIGITS_TO_NINE).find(_NINETEEN_DIGITS) < 0:
        try:
            return orjson.loads(raw), True
        except orjson.JSONDecodeError:
            pass  # maybe only a lone surrogate escape; the stdlib decides
    try:
        return json.loads(raw, parse_constant=_reject_constant), False
    except json.JSONDecodeError as exc:
        # One line is one message, so the column is what locates the problem.
        raise ConversionError(f"not valid JSON: {exc.msg} (column {exc.colno})") from None
    except UnicodeDecodeError as exc:
        raise ConversionError(f"not valid JSON: not UTF-8 at byte {exc.start}") from None
    except ValueError as exc:
        raise ConversionError(f"not valid JSON: {exc}") from None


def js_number(value: float) -> str:
    """The text JavaScript's Number::toString gives for ``value``."""
    if not math.isfinite(value):
        raise ConversionError(f"{value} is not a JSON number")
    if value == 0:
        return "0"  # JavaScript writes -0 as 0
    if value.is_integer() and abs(value) < 2**53:
        return str(int(value))  # exact, and what the digit rule below gives
    sign, digit_tuple, exponent = Decimal(repr(value)).as_tuple()
    digits = "".join(map(str, digit_tuple)).rstrip("0") or "0"
    assert isinstance(exponent, int)
    # n: where the decimal point sits relative to the digits (ECMA-262 Number::toString).
    n = len("".join(map(str, digit_tuple))) + exponent
    k = len(digits)
    prefix = "-" if sign else ""
    if k <= n <= 21:
        return prefix + digits + "0" * (n - k)
    if 0 < n <= 21:
        return prefix + digits[:n] + "." + digits[n:]
    if -6 < n <= 0:
        return prefix + "0." + "0" * (-n) + digits
    e = n - 1
    mantissa = digits if k == 1 else digits[0] + "." + digits[1:]
    return f"{prefix}{mantissa}e{'+' if e >= 0 else '-'}{abs(e)}"


def has_surrogate(text: str) -> bool:
    return _SURROGATE.search(text) is not None


def scrub_surrogates(text: str) -> str:
    """``text`` with lone surrogates replaced by U+FFFD (what UTF-8 can hold)."""
    return _SURROGATE.sub("\ufffd", text)


def string_text(text: str) -> str:
    """A JSON string literal, lone surrogates escaped as JavaScript does."""
    encoded = json.dumps(text, ensure_ascii=False)
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", encoded)


def prepare(value: Any) -> Any:
    """``value`` with everything orjson would write differently from
    JavaScript (floats, huge integers, lone surrogates) turned into fragments."""
    kind = type(value)
    if kind is str:
        return Fragment(string_text(value)) if _SURROGATE.search(value) else value
    if kind is int:
        return value if _INT64_MIN <= value <= _INT64_MAX else Fragment(str(value))
    if kind is float:
        return Fragment(js_number(value))
    if kind is dict:
        out = {}
        for key, item in value.items():
            if _SURROGATE.search(key):
                # orjson cannot write such a key; render the whole object here.
                return Fragment(_object_text(value))
            out[key] = prepare(item)
        return out
    if kind is list:
        return [prepare(item) for item in value]
    return value  # bool, None, Fragment


def _object_text(value: dict[str, Any]) -> str:
    parts = [f"{string_text(key)}:{dumps(prepare(item)).decode()}" for key, item in value.items()]
    return "{" + ",".join(parts) + "}"


def render_object(value: dict[str, Any]) -> Fragment:
    """An object of prepared values whose keys orjson cannot write."""
    parts = [f"{string_text(key)}:{dumps(item).decode()}" for key, item in value.items()]
    return Fragment("{" + ",".join(parts) + "}")


def dumps(value: Any) -> bytes:
    """Compact JSON bytes of an already prepared value."""
    return orjson.dumps(value)


def dump_value(value: Any) -> str:
    """Exact JavaScript JSON text of any parsed JSON value."""
    return orjson.dumps(prepare(value)).decode()
