"""JSON text exactly as JavaScript's ``JSON.stringify`` writes it.

orjson already matches JavaScript for strings (raw non-ASCII, lowercase
``\\u00xx`` control escapes) and integers. A few things need help:

* floats: JavaScript writes ``1`` for 1.0 and switches to exponent form only
  outside [1e-7, 1e21), so floats are rendered here and embedded as fragments;
* lone surrogates: valid in JavaScript strings (written as ``\\udxxx``), not in
  UTF-8, so orjson refuses them both ways; the stdlib parser accepts them;
* integers of 19+ digits: orjson silently turns some into floats, so such
  input goes through the stdlib parser, which keeps them exact;
* depth: orjson writes at most 254 levels, so deeper values (up to
  ``MAX_DEPTH``) are written by a small iterative writer here.

What is refused, always as ``ConversionError``: text that is not UTF-8 (the
reference never writes it; a raw lone surrogate counts), numbers JavaScript
reads as Infinity (``1e400``, a 400-digit integer), ``NaN``, and nesting
deeper than ``MAX_DEPTH``.
"""

from __future__ import annotations

import functools
import json
import math
import re
import sys
from decimal import Decimal
from typing import Any

import orjson

from omni_grpc.convert._errors import ConversionError

Fragment = orjson.Fragment
# Levels of nesting a line may have, the envelope object counting as one:
# orjson's own parsing limit, honoured by every other path here.
MAX_DEPTH = 1024
_SURROGATE = re.compile("[\ud800-\udfff]")
# A run of 19 digits (int64 bounds have 19) sends the text to the exact
# parser. Mapping every digit to "9" and searching with bytes.find is a
# C-speed scan, several times faster than the equivalent regex.
_DIGITS_TO_NINE = bytes.maketrans(b"012345678", b"999999999")
_NINETEEN_DIGITS = b"9" * 19
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
# The largest integer a double holds; past it JavaScript reads Infinity.
_DOUBLE_MAX_INT = int(sys.float_info.max)
_DOUBLE_MAX_DIGITS = len(str(_DOUBLE_MAX_INT))
# The stdlib parser recurses once per level; MAX_DEPTH levels need headroom.
# Raised once, here, and never lowered: other code may rely on a higher one.
_RECURSION_NEEDED = MAX_DEPTH * 2 + 200
if sys.getrecursionlimit() < _RECURSION_NEEDED:
    sys.setrecursionlimit(_RECURSION_NEEDED)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


class _OutOfRange(ValueError):
    def __init__(self, text: str) -> None:
        super().__init__(
            f"the number {_clip(text)} is outside the range of a double "
            "(JavaScript reads it as Infinity)"
        )


def _parse_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise _OutOfRange(text)
    return value


def _parse_int(text: str) -> int:
    digits = len(text) - (text[0] == "-")
    if digits > _DOUBLE_MAX_DIGITS or abs(value := int(text)) > _DOUBLE_MAX_INT:
        raise _OutOfRange(text)
    return value


def _clip(text: str) -> str:
    return text if len(text) <= 24 else f"{text[:12]}...({len(text.lstrip('-'))} digits)"


def loads(data: bytes | str) -> Any:
    """Parses JSON text; raises ``ConversionError`` (without location) on bad text."""
    return loads_checked(data)[0]


def loads_checked(data: bytes | str) -> tuple[Any, bool]:
    """Like ``loads``; the flag says orjson parsed it, so no string in it holds
    a lone surrogate and every number is a 64-bit int or a float."""
    if isinstance(data, str):
        try:
            raw = data.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ConversionError(
                f"not valid JSON: not UTF-8 (a lone surrogate at character {exc.start})"
            ) from None
    else:
        raw = data
    if raw.translate(_DIGITS_TO_NINE).find(_NINETEEN_DIGITS) < 0:
        try:
            return orjson.loads(raw), True
        except orjson.JSONDecodeError:
            pass  # maybe only a lone surrogate escape; the stdlib decides
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConversionError(f"not valid JSON: not UTF-8 at byte {exc.start}") from None
    try:
        value = json.loads(
            text, parse_constant=_reject_constant, parse_float=_parse_float, parse_int=_parse_int
        )
    except json.JSONDecodeError as exc:
        # One line is one message, so the column is what locates the problem.
        raise ConversionError(f"not valid JSON: {exc.msg} (column {exc.colno})") from None
    except RecursionError:
        raise _too_deep(text) from None
    except _OutOfRange as exc:
        raise ConversionError(str(exc), path=_out_of_range_path(text)) from None
    except ValueError as exc:
        raise ConversionError(f"not valid JSON: {exc}") from None
    if raw.count(b"[") + raw.count(b"{") > MAX_DEPTH and depth_of(value) > MAX_DEPTH:
        raise _too_deep(text)
    return value, False


def _too_deep(text: str) -> ConversionError:
    return ConversionError(
        f"nested deeper than {MAX_DEPTH} levels", path=deep_path(text, MAX_DEPTH)
    )


def deep_path(text: str, limit: int) -> str:
    """The JSON Pointer of the first value nested deeper than ``limit``."""
    return _path_scan(text, limit=limit)


def path_at(text: str, offset: int) -> str:
    """The JSON Pointer of the value that starts at character ``offset``."""
    return _path_scan(text, offset=offset)


def _path_scan(text: str, *, limit: int | None = None, offset: int | None = None) -> str:
    """A plain character scan, for error messages only (the parsers that
    refuse a text do not say where in its structure they stopped)."""
    stack: list[Any] = []  # per open container: [bracket, key or index]
    i, n = 0, len(text)
    pending_key: str | None = None
    while i < n:
        c = text[i]
        if offset is not None and i >= offset:
            if stack and stack[-1][0] == "{":
                stack[-1][1] = pending_key
            break
        if c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            if stack and stack[-1][0] == "{" and pending_key is None:
                try:
                    pending_key = json.loads(text[i : j + 1])
                except ValueError:
                    pending_key = text[i + 1 : j]
            i = j + 1
            continue
        if c in "[{":
            if stack and stack[-1][0] == "{":
                stack[-1][1] = pending_key
            if limit is not None and len(stack) >= limit:
                break
            stack.append([c, 0 if c == "[" else None])
            pending_key = None
        elif c in "]}":
            if stack:
                stack.pop()
        elif c == "," and stack:
            if stack[-1][0] == "[":
                stack[-1][1] += 1
            else:
                pending_key = None
        i += 1
    steps = [str(step).replace("~", "~0").replace("/", "~1") for _, step in stack]
    return "".join(f"/{step}" for step in steps)


_STRING_LITERAL = re.compile(r'"(?:[^"\\]|\\.)*"')
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?")


def _out_of_range_path(text: str) -> str:
    """Where the first number JavaScript would read as Infinity sits."""
    blanked = _STRING_LITERAL.sub(lambda m: '"' + " " * (len(m.group()) - 2) + '"', text)
    for match in _NUMBER.finditer(blanked):
        token = match.group()
        try:
            if "." in token or "e" in token or "E" in token:
                _parse_float(token)
            else:
                _parse_int(token)
        except ValueError:
            return path_at(text, match.start())
    return ""


def depth_of(value: Any) -> int:
    """Levels of nesting in a parsed value (a scalar is 0), without recursion."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        item, level = stack.pop()
        kind = type(item)
        if kind is dict:
            deepest = max(deepest, level)
            stack.extend((v, level + 1) for v in item.values())
        elif kind is list:
            deepest = max(deepest, level)
            stack.extend((v, level + 1) for v in item)
    return deepest


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


def _int_text(value: int) -> str:
    if abs(value) > _DOUBLE_MAX_INT:
        raise ConversionError("a number is outside the range of a double")
    return str(value)


def has_surrogate(text: str) -> bool:
    # The surrogates are the only code points strict UTF-8 refuses, and
    # CPython knows a string is ASCII without reading it: a 1.5 KB base64
    # blob costs nanoseconds here, against microseconds for the regex.
    if text.isascii():
        return False
    try:
        text.encode()
    except UnicodeEncodeError:
        return True
    return False


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
        return value if _INT64_MIN <= value <= _INT64_MAX else Fragment(_int_text(value))
    if kind is float:
        return Fragment(js_number(value))
    if kind is dict:
        out = {}
        for key, item in value.items():
            if type(key) is not str:
                raise ConversionError(f"an object key is {type(key).__name__}, not a string")
            if _SURROGATE.search(key):
                # orjson cannot write such a key; render the whole object here.
                return Fragment(_slow_text(value))
            out[key] = prepare(item)
        return out
    if kind is list:
        return [prepare(item) for item in value]
    if value is None or kind is bool or kind is Fragment:
        return value
    raise ConversionError(f"{kind.__name__} is not a JSON value")


def render_object(value: dict[str, Any]) -> Fragment:
    """An object of prepared values whose keys orjson cannot write."""
    parts = [f"{string_text(key)}:{dumps(item).decode()}" for key, item in value.items()]
    return Fragment("{" + ",".join(parts) + "}")


def dumps(value: Any) -> bytes:
    """Compact JSON bytes of an already prepared value."""
    try:
        return orjson.dumps(value)
    except orjson.JSONEncodeError as exc:
        raise ConversionError(f"cannot write JSON: {exc}") from None


def dump_value(value: Any) -> str:
    """Exact JavaScript JSON text of any parsed JSON value, at any depth up to
    ``MAX_DEPTH``; ``ConversionError`` for anything that is not JSON."""
    try:
        return orjson.dumps(prepare(value)).decode()
    except (RecursionError, orjson.JSONEncodeError):
        return _slow_text(value)  # deeper than orjson (or the stack) goes


def _slow_text(value: Any) -> str:
    """The writer for what orjson cannot take: iterative, so any depth works."""
    out: list[str] = []
    # Work items: a value to write, or a literal piece of text (str).
    stack: list[tuple[bool, Any, int, str]] = [(True, value, 1, "")]
    while stack:
        is_value, item, level, path = stack.pop()
        if not is_value:
            out.append(item)
            continue
        kind = type(item)
        if kind is dict or kind is list:
            if level > MAX_DEPTH:
                raise ConversionError(f"nested deeper than {MAX_DEPTH} levels", path=path)
            if kind is dict:
                entries = list(item.items())
                out.append("{")
                stack.append((False, "}", level, path))
                for index in range(len(entries) - 1, -1, -1):
                    key, sub = entries[index]
                    if type(key) is not str:
                        raise ConversionError("an object key is not a string", path=path)
                    step = key.replace("~", "~0").replace("/", "~1")
                    stack.append((True, sub, level + 1, f"{path}/{step}"))
                    stack.append((False, ("," if index else "") + string_text(key) + ":", 0, ""))
            else:
                out.append("[")
                stack.append((False, "]", level, path))
                for index in range(len(item) - 1, -1, -1):
                    stack.append((True, item[index], level + 1, f"{path}/{index}"))
                    if index:
                        stack.append((False, ",", 0, ""))
        elif kind is Fragment:
            out.append(orjson.dumps(item).decode())  # a fragment writes its own text
        else:
            try:
                out.append(dumps(prepare(item)).decode())
            except ConversionError as exc:
                raise ConversionError(exc.reason, path=path) from None
    return "".join(out)


def canonical(text: str) -> str:
    """``text`` as one compact JSON value, for embedding in a line.

    Text that reaches the codec from outside (hints, unknown payloads, tool
    schemas, fidelity) is never copied unchecked: it must be exactly one JSON
    value, and it is written in JavaScript's spelling (no whitespace, so no
    line break can ride along). Text already in that form comes back as it
    is, so exact bytes from JavaScript survive.
    """
    if len(text) <= _CACHED_TEXT:
        return _canonical_cached(text)
    return _canonical(text)


# Texts repeat (the same tool schemas in every session), so small ones are
# cached; large ones are not, so the cache cannot pin megabytes of schemas.
_CACHED_TEXT = 64 * 1024


@functools.lru_cache(maxsize=512)
def _canonical_cached(text: str) -> str:
    return _canonical(text)


def _canonical(text: str) -> str:
    try:
        raw = text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ConversionError(
            f"not valid JSON: not UTF-8 (a lone surrogate at character {exc.start})"
        ) from None
    try:
        quick = orjson.dumps(orjson.loads(raw))
    except (orjson.JSONDecodeError, orjson.JSONEncodeError):
        quick = None
    if quick == raw:
        return text
    spelled = dump_value(loads(raw))
    return spelled
