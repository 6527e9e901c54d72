"""The native codec's fidelity: a flat object of strings, booleans and nulls
in sorted key order goes through C both ways (text to wire and back), and
whatever fidelity holds, the native codec agrees with the Python one byte
for byte: the message, the line written back, the ``.binpb`` frames of both
forms, and the JSONL read back from them. Anything else it declines.

Property tests over generated fidelity (keys sorted or not, repeated,
non-ASCII, with NUL; values of every JSON kind, long base64 among them) and
over Struct wire bytes as other writers order them (protobuf serializes a
map in hash order unless asked to be deterministic). Each runs in seconds.
"""

from __future__ import annotations

import base64
import io
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from omni_grpc.convert import _jsontext as jt
from omni_grpc.convert import parse_message, serialize_message
from omni_grpc.convert._native import NATIVE
from omni_grpc.trace import convert as trace_convert
from omni_grpc_proto.omni.v1 import omni_pb2
from tests.test_convert_native import both_parse, both_serialize, convert_both, outcome, pure, wire

pytestmark = pytest.mark.skipif(
    NATIVE is None, reason="native codec not built (run scripts/setup) or turned off"
)
FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

PAYLOADS = {
    "thinking": {
        "type": "thinking",
        "role": "assistant",
        "thinking": "hm",
        "stop_reason": "completed",
    },
    "text": {"type": "text", "role": "assistant", "text": "hi", "stop_reason": "completed"},
    "tool_call": {
        "type": "tool_call",
        "role": "assistant",
        "name": "exec_command",
        "arguments": '{"cmd":"ls"}',
        "tool_call_id": "call_0",
        "stop_reason": "completed",
    },
}
KEYS = st.sampled_from(["id", "phase", "signature", "thoughtSignature", "", "é", "ключ", "a\x00b"])
LONG_BASE64 = st.binary(min_size=96, max_size=400).map(lambda b: base64.b64encode(b).decode())
FLAT_VALUES = st.one_of(
    st.text(max_size=20), LONG_BASE64, st.booleans(), st.none(), st.just('line\n"q"\\')
)
ANY_VALUES = st.recursive(
    st.one_of(
        FLAT_VALUES, st.integers(-(2**60), 2**60), st.floats(allow_nan=False, allow_infinity=False)
    ),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3),
    max_leaves=6,
)


def line_of(arm: str, fidelity: Any) -> bytes:
    payload = {**PAYLOADS[arm], "fidelity": fidelity}
    envelope = {"timestamp": "2026-01-02T03:04:05.678Z", "type": "model_msg", "payload": payload}
    return jt.dump_value(envelope).encode()


def agree(line: bytes) -> None:
    """Native = pure for the line, its message written back, and whole
    traces of it in both .binpb forms and back."""
    both_parse(line)
    native_wire = NATIVE.encode_text(line) if NATIVE is not None else None
    with pure():
        ok, msg = outcome(lambda: parse_message(line))
    if ok != "ok":
        assert native_wire is None
        return
    if native_wire is not None:  # the C writer's own bytes, not a re-serialization
        assert native_wire == wire(msg)
    both_serialize(msg)
    trace = line + b"\n" + line + b"\n"
    for plain in (False, True):

        def to_binpb(plain: bool = plain) -> bytes:
            sink = io.BytesIO()
            trace_convert.jsonl_to_binpb(io.BytesIO(trace), sink, plain=plain)
            return sink.getvalue()

        convert_both(to_binpb)
        with pure():
            frames = to_binpb()

        def back(frames: bytes = frames) -> bytes:
            sink = io.BytesIO()
            trace_convert.binpb_to_jsonl(io.BytesIO(frames), sink)
            return sink.getvalue()

        convert_both(back)


@FAST
@given(
    st.sampled_from(sorted(PAYLOADS)),
    st.dictionaries(KEYS.filter(lambda k: "\x00" not in k), FLAT_VALUES, max_size=5),
    st.booleans(),
    st.randoms(),
)
def test_flat_fidelity_goes_through_c_both_ways(
    arm: str, fidelity: dict[str, Any], in_order: bool, rng: Any
) -> None:
    """Sorted keys (no hint), or any order (the key order hint); a key that
    begins the next one ("a", "ab") is serialized after it (upb's
    deterministic map order), as the C writer writes it too."""
    keys = sorted(fidelity)
    if not in_order:
        rng.shuffle(keys)
    line = line_of(arm, {k: fidelity[k] for k in keys})
    assert NATIVE is not None
    assert NATIVE.encode_text(line) is not None
    with pure():
        msg = parse_message(line)
    assert NATIVE.decode_text(wire(msg)) == line
    # protobuf's own (hash-ordered) serialization is read too
    assert NATIVE.decode_text(msg.SerializeToString()) == line
    assert serialize_message(parse_message(line)) == line
    agree(line)


@FAST
@given(
    st.sampled_from(sorted(PAYLOADS)), st.dictionaries(KEYS, ANY_VALUES, max_size=5), st.randoms()
)
def test_any_fidelity_agrees(arm: str, fidelity: dict[str, Any], rng: Any) -> None:
    keys = list(fidelity)
    rng.shuffle(keys)
    agree(line_of(arm, {k: fidelity[k] for k in keys}))


def test_fidelity_spelled_with_whitespace_and_escapes_agrees() -> None:
    base = line_of("thinking", {"a": "x", "b": True})
    spelled = base.replace(
        b'"fidelity":{"a":"x","b":true}', b'"fidelity" : { "\\u0061" : "\\u0078" ,"b":true }'
    )
    assert spelled != base
    assert NATIVE is not None and NATIVE.encode_text(spelled) is not None
    agree(spelled)


def test_duplicate_and_numeric_fidelity_decline_to_python() -> None:
    assert NATIVE is not None
    for text in (
        b'{"a":"x","a":"y"}',
        b'{"a":1}',
        b'{"a":{}}',
        b'{"a":[]}',
        b'{"a\\u0000":"x"}',
    ):
        line = line_of("text", {}).replace(b'"fidelity":{}', b'"fidelity":' + text)
        assert NATIVE.encode_text(line) is None, text
        agree(line)


def test_unsorted_keys_travel_as_the_python_codecs_key_order() -> None:
    """OpenAI's reasoning fidelity ({"id", "encrypted_content"}): the C
    writer records the key order the Python codec records, and reads it."""
    assert NATIVE is not None
    for text in (b'{"id":"rs_1","encrypted_content":"gAAA"}', b'{"b":"x","a":"y","ab":null}'):
        line = line_of("thinking", {}).replace(b'"fidelity":{}', b'"fidelity":' + text)
        native = NATIVE.encode_text(line)
        with pure():
            msg = parse_message(line)
        assert len(msg.key_orders) == 1
        assert native == wire(msg)
        assert NATIVE.decode_text(msg.SerializeToString()) == line
        agree(line)


@FAST
@given(
    st.dictionaries(KEYS.filter(lambda k: "\x00" not in k), FLAT_VALUES, min_size=2, max_size=5),
    st.randoms(),
    st.sampled_from(["drop", "add", "set", "hint"]),
)
def test_a_struct_edited_after_its_key_order_agrees(
    fidelity: dict[str, Any], rng: Any, edit: str
) -> None:
    """A stub edit after the hint was written (a key removed or added, a
    value set, the hint's own keys changed): the C reader takes only a hint
    that lists the Struct's keys exactly, and agrees with the Python codec."""
    keys = list(fidelity)
    rng.shuffle(keys)
    with pure():
        msg = parse_message(line_of("text", {k: fidelity[k] for k in keys}))
    fields = msg.text.fidelity.fields
    if edit == "drop":
        del fields[keys[0]]
    elif edit == "add":
        fields["zz-new"].string_value = "v"
    elif edit == "set":
        fields[keys[-1]].bool_value = True
    elif msg.key_orders:
        msg.key_orders[0].keys.append("zz-stale")
    both_serialize(msg)
    both_serialize(omni_pb2.OmniMessage.FromString(msg.SerializeToString()))


def struct_entry(key: bytes, value: bytes) -> bytes:
    entry = b"\x0a" + bytes([len(key)]) + key + b"\x12" + bytes([len(value)]) + value
    return b"\x0a" + bytes([len(entry)]) + entry


@given(
    st.permutations(
        [(b"a", b"\x1a\x01x"), (b"b", b"\x20\x01"), (b"c", b"\x08\x00"), (b"d", b"\x1a\x00")]
    ),
    st.sampled_from(
        [b"", b"\x1a\x01y", b"\x20\x02", b"\x08\x01", b"\x11" + b"\x00" * 8, b"\x2a\x00"]
    ),
)
@FAST
def test_struct_wire_in_any_order_or_with_odd_values_agrees(
    entries: list[tuple[bytes, bytes]], odd: bytes
) -> None:
    """Struct bytes from other writers: entries in any order, a key twice,
    a value unset, a number, a bool of 2, a null of 1, a nested struct."""
    body = b"".join(struct_entry(k, v) for k, v in entries)
    if odd:
        body += struct_entry(b"a" if odd == b"\x1a\x01y" else b"e", odd)
    with pure():
        plain = parse_message(line_of("text", {"z": "1"}))
    plain.text.ClearField("fidelity")
    field = omni_pb2.Text.DESCRIPTOR.fields_by_name["fidelity"].number
    arm = omni_pb2.OmniMessage.DESCRIPTOR.fields_by_name["text"].number
    inner = plain.text.SerializeToString() + bytes([(field << 3) | 2, len(body)]) + body
    data = b"\x0a\x01t" + bytes([(arm << 3) | 2, len(inner)]) + inner
    parsed = omni_pb2.OmniMessage.FromString(data)
    both_serialize(parsed)
    assert NATIVE is not None
    text = NATIVE.decode_text(data)
    if not odd:
        assert text is not None
        assert orjson.loads(text)["payload"]["fidelity"] == {
            "a": "x",
            "b": True,
            "c": None,
            "d": "",
        }
    with pure():
        reference = outcome(lambda: serialize_message(parsed))
    if text is not None:
        assert reference == ("ok", text)


def test_default_form_leaves_long_fidelity_strings_to_python() -> None:
    """In the default .binpb form a fidelity string of PACK_FROM bytes or
    more is the Python codec's (it may be stored as bytes); --plain's C
    writer takes it."""
    assert NATIVE is not None
    long = base64.b64encode(bytes(range(200))).decode()
    line = line_of("thinking", {"signature": long}) + b"\n"
    _, stop, records = NATIVE.jsonl_to_binpb(line, 0, 1 << 26, 128)
    assert (stop, records) == (0, 0)
    _, stop, records = NATIVE.jsonl_to_binpb(line, 0, 1 << 26, 0)
    assert (stop, records) == (len(line), 1)
    agree(line.rstrip(b"\n"))


def test_an_extension_from_other_source_is_set_aside_with_a_warning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An extension with every function but another SOURCE_VERSION (built
    before a change of what a function takes) is never called."""
    import importlib
    import types

    from omni_grpc.convert import _native

    assert NATIVE is not None
    stale = types.ModuleType("omni_grpc.convert._codec")
    for name in _native._ENTRY_POINTS:
        setattr(stale, name, getattr(NATIVE, name))
    for version in (None, _native.SOURCE_VERSION - 1):
        if version is not None:
            stale.SOURCE_VERSION = version  # type: ignore[attr-defined]
        monkeypatch.setattr(importlib, "import_module", lambda _name, m=stale: m)
        with pytest.warns(RuntimeWarning, match="other source"):
            assert _native._load() is None
