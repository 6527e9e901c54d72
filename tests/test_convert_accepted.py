"""Whatever the parser accepts converts back.

For every line ``parse_message`` accepts, in any spelling and of any shape
(unknown and empty kinds, unknown envelope types, number forms JavaScript
never writes, repeated keys, corpus lines with bytes changed), on the native
and on the pure path:

* ``serialize_message`` succeeds and gives ``JSON.stringify(JSON.parse(line))``
  (our ``dump_value`` of the parsed value: JavaScript's number text, first
  place and last value of a repeated key), so a line JavaScript wrote comes
  back byte for byte;
* the message's wire bytes give that line too (what ``.binpb`` stores);
* parsing that line gives the identical message (proto -> JSON -> proto);
* the trace validator reads the record (it is not called malformed).

A line the parser refuses must be refused by both paths alike (the
differential tests in test_convert_native.py check the error text).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_convert_properties import envelopes, json_values, strings

from omni_grpc.convert import ConversionError, _message, parse_message, serialize_message
from omni_grpc.convert import _jsontext as jt
from omni_grpc.trace import convert as trace_convert
from omni_grpc.trace.records import TraceRecord
from omni_grpc.trace.validate import validate_records
from omni_grpc_proto.omni.v1 import omni_pb2

CORPUS = Path(__file__).parent / "conformance"
PROFILE = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@contextmanager
def pure() -> Iterator[None]:
    saved = _message.NATIVE
    _message.NATIVE = trace_convert.NATIVE = None
    try:
        yield
    finally:
        _message.NATIVE = trace_convert.NATIVE = saved


def wire(msg: omni_pb2.OmniMessage) -> bytes:
    return msg.SerializeToString(deterministic=True)


def accepted_converts_back(line: bytes) -> tuple[str, Any]:
    """The invariant for one line on the current path; the outcome, for
    comparing paths."""
    try:
        msg = parse_message(line)
    except ConversionError as exc:
        return "refused", str(exc)
    expected = jt.dump_value(jt.loads(line)).encode()
    out = serialize_message(msg)  # must not raise: the parser accepted it
    assert out == expected
    assert serialize_message(omni_pb2.OmniMessage.FromString(wire(msg))) == expected
    again = parse_message(out)
    assert wire(again) == wire(msg)
    assert again == msg
    issues = list(validate_records([TraceRecord(1, msg)], trace=False))
    assert all(issue.code != "malformed" for issue in issues)
    return "ok", wire(msg)


def check_both_paths(line: bytes) -> None:
    native = accepted_converts_back(line)
    with pure():
        reference = accepted_converts_back(line)
    assert native == reference


# ---- odd shapes --------------------------------------------------------------

envelope_types = st.sampled_from(["model_msg", "event_msg", "session_meta", "", "future_msg"])
payload_types = st.sampled_from(["text", "request_begin", "future", "", "type"]) | strings


@st.composite
def odd_envelopes(draw: st.DrawFn) -> dict[str, Any]:
    """Envelopes whose types are empty, unknown, mismatched or missing."""
    payload: dict[str, Any] = {}
    if draw(st.booleans()):
        payload["type"] = draw(payload_types)
    payload.update(draw(st.dictionaries(strings, json_values, max_size=3)))
    items: list[tuple[str, Any]] = [
        ("timestamp", draw(strings)),
        ("type", draw(envelope_types | strings)),
        ("payload", payload),
    ]
    if draw(st.booleans()):
        items.append(("origin", draw(st.lists(strings, min_size=0, max_size=2))))
    items += list(draw(st.dictionaries(strings, json_values, max_size=2)).items())
    if draw(st.booleans()):
        items = draw(st.permutations(items))
    return dict(items)


def respelled(value: Any, rng: random.Random) -> str:
    """Spellings JavaScript never writes: ``1.0``, ``-0``, ``-0.0``, ``1e2``,
    whitespace, repeated keys (the parser decides what each means)."""
    ws = rng.choice(["", "", "", " ", "\n "])
    if isinstance(value, dict):
        items = list(value.items())
        if items and rng.randrange(8) == 0:
            items.append(rng.choice(items))
        inner = ",".join(f"{ws}{jt.string_text(str(k))}:{respelled(v, rng)}" for k, v in items)
        return "{" + inner + ws + "}"
    if isinstance(value, list):
        return "[" + ",".join(respelled(v, rng) for v in value) + "]"
    if type(value) is int and abs(value) < 2**53:
        form = rng.randrange(8)
        if form == 0:
            return f"{value}.0"
        if form == 1:
            return f"{value}e0"
        if form == 2 and value == 0:
            return rng.choice(["-0", "-0.0", "0.0", "-0e0"])
        return str(value)
    if type(value) is float:
        form = rng.randrange(6)
        if form == 0:
            return repr(value)  # Python's float text: 1.0, 1e-07
        if form == 1 and value == 0:
            return "-0.0"
    return jt.dump_value(value)


@PROFILE
@given(envelopes())
def test_generated_lines_convert_back(obj: dict[str, Any]) -> None:
    check_both_paths(jt.dump_value(obj).encode())


@PROFILE
@given(odd_envelopes())
def test_odd_shapes_convert_back_or_are_refused(obj: dict[str, Any]) -> None:
    check_both_paths(jt.dump_value(obj).encode())


@PROFILE
@given(envelopes() | odd_envelopes(), st.randoms(use_true_random=False))
def test_other_spellings_convert_back(obj: dict[str, Any], rng: random.Random) -> None:
    check_both_paths(respelled(obj, rng).encode())


def corpus_lines() -> list[bytes]:
    lines = []
    for path in sorted(CORPUS.glob("*.jsonl")):
        lines += [line for line in path.read_bytes().split(b"\n") if line]
    return lines


def test_the_corpus_and_its_spellings_convert_back() -> None:
    rng = random.Random(5)
    for line in corpus_lines():
        check_both_paths(line)
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        for _ in range(3):
            check_both_paths(respelled(obj, rng).encode())


@PROFILE
@given(st.sampled_from(range(400)), st.data())
def test_mutated_corpus_lines_convert_back(index: int, data: st.DataObject) -> None:
    lines = corpus_lines()
    line = bytearray(lines[index % len(lines)])
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(line)))
        piece = data.draw(st.sampled_from([b'""', b"0", b"-0", b"1.0", b"{}", b"[]", b",", b"x"]))
        if data.draw(st.booleans()) and at < len(line):
            line[at : at + 1] = piece
        else:
            line[at:at] = piece
    check_both_paths(bytes(line))


@pytest.mark.parametrize(
    "line",
    [
        # issue 28: parsed and converted to .binpb, but refused on the way back
        b'{"timestamp":"t","type":"","payload":{"type":"future"}}',
        # issue 28: "context":1.0 left a hint a second parse drops
        b'{"timestamp":"t","type":"event_msg","payload":{"type":"compaction_begin",'
        b'"reason":"context","mode":"summarize","context":1.0,"turns":2}}',
        b'{"timestamp":"t","type":"model_msg","payload":{"type":"text","role":"assistant",'
        b'"text":"x","stop_reason":"completed","fidelity":{"a":-0.0,"b":1.0}}}',
        b'{"timestamp":"t","type":"event_msg","payload":{"type":"tool_list_ready","tools":'
        b'[{"name":"n","description":"d","parameters":{"max":1.0,"min":-0.0}}]}}',
    ],
)
def test_reported_lines(line: bytes) -> None:
    check_both_paths(line)


@PROFILE
@given(st.dictionaries(strings, json_values, max_size=5), st.sampled_from(["text", "tool_call"]))
def test_fidelity_is_stored_once_unless_hints_cannot_say_it(
    fidelity: dict[str, Any], kind: str
) -> None:
    """Key order, integers past 2**53 and lone surrogates in strings are
    envelope hints beside the Struct; the exact text (a second copy) is kept
    only for a key with a lone surrogate, which the Struct's keys cannot hold
    apart."""
    payload: dict[str, Any] = {"type": kind, "role": "assistant"}
    if kind == "text":
        payload["text"] = "x"
    else:
        payload |= {"name": "n", "arguments": "{}", "tool_call_id": "c"}
    payload["fidelity"] = fidelity
    line = jt.dump_value({"timestamp": "t", "type": "model_msg", "payload": payload}).encode()
    check_both_paths(line)
    msg = parse_message(line)
    if not any(jt.has_surrogate(key) for key in _keys(fidelity)):
        assert getattr(msg, kind).fidelity_json == ""


def _keys(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from _keys(item)
    elif isinstance(value, list):
        for item in value:
            yield from _keys(item)
