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
* the trace validator reads the record (it is not called malformed);
* its ``.binpb`` record as ``omni-grpc convert`` writes it by default
  (fidelity's long base64 as bytes, large tool lists in the marked form),
  and with ``--plain``, reads back to that line and that message, and the
  batch converter writes the same record (issue 28: the default form).

A line the parser refuses must be refused by both paths alike (the
differential tests in test_convert_native.py check the error text).
"""

from __future__ import annotations

import base64
import io
import random
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest
from google.protobuf.internal.decoder import _DecodeVarint
from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis import strategies as st
from test_convert_properties import envelopes, json_values, objects, strings

from omni_grpc.convert import ConversionError, _message, parse_message, serialize_message
from omni_grpc.convert import _jsontext as jt
from omni_grpc.convert._schema import ENVELOPE_TYPE_OF_ARM, PAYLOADS
from omni_grpc.trace import convert as trace_convert
from omni_grpc.trace import read_binpb
from omni_grpc.trace.binpb import MARK, encode_frame
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
    frame = encode_frame(msg)  # the default .binpb form
    for written in (frame, encode_frame(msg, plain=True)):
        (record,) = read_binpb(io.BytesIO(written))
        assert serialize_message(record.message) == expected
        assert wire(record.message) == wire(msg)
    batch = io.BytesIO()
    trace_convert.jsonl_to_binpb(io.BytesIO(expected + b"\n"), batch)
    assert batch.getvalue() == frame
    return "ok", wire(msg), frame


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


# ---- the default .binpb form ---------------------------------------------------

FIDELITY_SPECS = [p for p in PAYLOADS if any(f.key == "fidelity" for f in p.fields)]
TOOL_LIST = next(p for p in PAYLOADS if p.arm == "tool_list_ready")


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


# Canonical base64 long enough to be stored as bytes, and near misses that
# must stay text: URL-safe, unpadded, padding bits set, short, a line break.
base64_texts = st.one_of(
    st.binary(min_size=96, max_size=400).map(_b64),
    st.binary(min_size=96, max_size=400).map(lambda b: _b64(b).replace("+", "-").replace("/", "_")),
    st.binary(min_size=97, max_size=400).map(lambda b: _b64(b).rstrip("=")),
    st.binary(min_size=97, max_size=400)
    .filter(lambda b: len(b) % 3 == 1)
    .map(lambda b: _b64(b)[:-3] + "B=="),
    st.binary(min_size=1, max_size=95).map(_b64),
    st.binary(min_size=96, max_size=200).map(lambda b: _b64(b)[:76] + "\n" + _b64(b)[76:]),
)
fidelity_values = st.recursive(
    base64_texts | json_values,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(strings, inner, max_size=3),
    max_leaves=6,
)


@st.composite
def default_form_envelopes(draw: st.DrawFn) -> dict[str, Any]:
    """Lines a default .binpb stores differently: fidelity holding base64
    (top level, nested, in lists, under keys that need pointer escapes), and
    tool lists large enough to be stored in the marked form."""
    spec = draw(st.sampled_from([*FIDELITY_SPECS, TOOL_LIST]))
    payload = draw(objects(spec))
    if spec is TOOL_LIST:
        tool = {"name": "t", "description": "d " * 40, "parameters": draw(json_values)}
        tools = payload.get("tools")
        payload["tools"] = [
            *(tools if isinstance(tools, list) else []),
            *[tool] * draw(st.integers(1, 6)),
        ]
    else:
        keys = strings | st.sampled_from(["encrypted_content", "signature", "a/b", "~0", ""])
        fidelity = draw(st.dictionaries(keys, fidelity_values, min_size=1, max_size=4))
        old = payload.get("fidelity")
        if isinstance(old, dict) and draw(st.booleans()):
            fidelity = {**old, **fidelity}
        payload["fidelity"] = fidelity
    items = [("timestamp", draw(strings)), ("type", ENVELOPE_TYPE_OF_ARM[str(spec.arm)])]
    items.append(("payload", payload))
    if draw(st.integers(0, 4)) == 0:
        items = draw(st.permutations(items))
    return dict(items)


@PROFILE
@given(default_form_envelopes(), st.randoms(use_true_random=False))
def test_default_form_lines_convert_back(obj: dict[str, Any], rng: random.Random) -> None:
    check_both_paths(jt.dump_value(obj).encode())
    check_both_paths(respelled(obj, rng).encode())


def stored_form(obj: dict[str, Any]) -> str:
    """How a default .binpb stores the line: "marked", "base64" or "plain"."""
    try:
        frame = encode_frame(parse_message(jt.dump_value(obj).encode()))
    except ConversionError:
        return "refused"
    _, start = _DecodeVarint(frame, 0)
    body = frame[start:]
    if body[:1] == MARK:
        return "marked"
    return "base64" if omni_pb2.OmniMessage.FromString(body).base64_values else "plain"


@pytest.mark.parametrize("form", ["marked", "base64", "plain"])
def test_the_default_form_strategy_reaches(form: str) -> None:
    """The strategy above makes records of each stored form, so the property
    over it is not vacuous."""
    found = find(
        default_form_envelopes(),
        lambda obj: stored_form(obj) == form,
        # a search, not a property: the first example found will do (no
        # shrinking), and no health check may stop it on a loaded machine
        settings=settings(
            max_examples=2000,
            deadline=None,
            phases=[Phase.generate],
            suppress_health_check=list(HealthCheck),
        ),
    )
    assert stored_form(found) == form


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
