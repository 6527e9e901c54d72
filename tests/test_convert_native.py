"""The native codec against the Python codec (the reference): byte-identical
output or the same ConversionError, over the corpus, hypothesis-generated
lines and messages, and mutated wire bytes. Each case runs both paths in this
process by switching ``_message.NATIVE`` off and on."""

from __future__ import annotations

import io
import os
import random
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_convert_accepted import odd_envelopes, respelled
from test_convert_properties import envelopes, json_values
from test_convert_safety import messages

from omni_grpc.convert import (
    ConversionError,
    _message,
    message_from_dict,
    parse_message,
    serialize_message,
)
from omni_grpc.convert import _jsontext as jt
from omni_grpc.convert._native import NATIVE
from omni_grpc.trace import convert as trace_convert
from omni_grpc.trace.binpb import encode_varint
from omni_grpc_proto.omni.v1 import omni_pb2

CORPUS = Path(__file__).parent / "conformance"
T = TypeVar("T")

if (
    NATIVE is None
    and os.environ.get("OMNI_GRPC_NATIVE") != "0"
    and os.environ.get("OMNI_REQUIRE_TOOLCHAINS") == "1"
    and shutil.which("cc")
):
    # In CI a compiler is here, so scripts/setup built the extension: its
    # absence is a build bug, not a reason to skip.
    pytest.fail("the native codec was not built although a C compiler is present")
pytestmark = pytest.mark.skipif(
    NATIVE is None, reason="native codec not built (run scripts/setup) or turned off"
)
PROFILE = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@contextmanager
def pure() -> Iterator[None]:
    saved = _message.NATIVE
    _message.NATIVE = trace_convert.NATIVE = None
    try:
        yield
    finally:
        _message.NATIVE = trace_convert.NATIVE = saved


def outcome(work: Callable[[], T]) -> tuple[str, Any]:
    try:
        return "ok", work()
    except ConversionError as exc:
        return "error", (type(exc).__name__, str(exc))


def wire(msg: omni_pb2.OmniMessage) -> bytes:
    return msg.SerializeToString(deterministic=True)


def both_parse(data: bytes) -> None:
    native = outcome(lambda: wire(parse_message(data)))
    with pure():
        reference = outcome(lambda: wire(parse_message(data)))
    assert native == reference


def both_serialize(msg: omni_pb2.OmniMessage) -> None:
    native = outcome(lambda: serialize_message(msg))
    with pure():
        reference = outcome(lambda: serialize_message(msg))
    assert native == reference


def corpus_lines() -> list[bytes]:
    lines = []
    for path in sorted(CORPUS.glob("*.jsonl")):
        lines += [line for line in path.read_bytes().split(b"\n") if line]
    return lines


def test_corpus_is_identical_both_ways_and_mostly_native() -> None:
    assert NATIVE is not None
    handled = text_handled = 0
    lines = corpus_lines()
    for line in lines:
        both_parse(line)
        try:
            with pure():
                msg = parse_message(line)
        except ConversionError:
            continue
        both_serialize(msg)
        obj = orjson.loads(line)
        native = NATIVE.encode(obj) if type(obj) is dict else None
        if native is not None and NATIVE.decode(wire(msg)) is not None:
            handled += 1
            assert omni_pb2.OmniMessage.FromString(native) == msg
        if NATIVE.encode_text(line) is not None and NATIVE.decode_text(wire(msg)) is not None:
            text_handled += 1
            assert NATIVE.encode_text(line) == wire(msg)
            assert NATIVE.decode_text(wire(msg)) == line
    # The native path must carry the corpus, not decline it all to Python.
    assert handled >= 0.9 * len(lines)
    assert text_handled >= 0.9 * len(lines)


@PROFILE
@given(envelopes())
def test_generated_lines_agree(obj: dict[str, Any]) -> None:
    line = jt.dump_value(obj).encode()
    both_parse(line)
    with pure():
        msg = parse_message(line)
    both_serialize(msg)
    native = outcome(lambda: wire(message_from_dict(obj)))
    with pure():
        assert native == outcome(lambda: wire(message_from_dict(obj)))


@PROFILE
@given(st.one_of(envelopes(), odd_envelopes()))
def test_one_call_for_wire_and_text_agrees_with_two(obj: dict[str, Any]) -> None:
    """``encode_with_text`` is ``encode`` then ``decode_text`` in one call, and
    the engine path built on it gives what the Python codec gives."""
    assert NATIVE is not None
    wire_only = NATIVE.encode(obj)
    both = NATIVE.encode_with_text(obj)
    if wire_only is None:
        assert both is None
    else:
        assert both == (wire_only, NATIVE.decode_text(wire_only))
    native = outcome(lambda: _message.encode_message_dict(obj))
    with pure():
        assert native == outcome(lambda: _message.encode_message_dict(obj))


def string_slots(value: Any) -> list[tuple[Any, Any]]:
    """(container, key) of every string value inside a payload, at any depth."""
    slots: list[tuple[Any, Any]] = []
    items = value.items() if isinstance(value, dict) else enumerate(value)
    for key, item in items:
        if isinstance(item, str) and key != "type":
            slots.append((value, key))
        elif isinstance(item, (dict, list)):
            slots += string_slots(item)
    return slots


# Where a length's varint grows a byte: the native codec writes the length
# of every nested message and of the payload itself, so each length size, at
# each depth, is its own case.
VARINT_EDGES = [0, 1, 127, 128, 16_383, 16_384, 2_097_151, 2_097_152]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(envelopes(), st.data())
def test_a_string_of_any_length_size_agrees_at_any_depth(
    obj: dict[str, Any], data: st.DataObject
) -> None:
    """One string anywhere in the payload (a nested message's too) grown to a
    size where its length, or an enclosing message's, takes one more byte:
    wire bytes and text agree with the Python codec's, by each native path."""
    assert NATIVE is not None
    payload = obj.get("payload")
    slots = string_slots(payload) if isinstance(payload, dict) else []
    if slots:
        container, key = data.draw(st.sampled_from(slots))
        size = max(0, data.draw(st.sampled_from(VARINT_EDGES)) + data.draw(st.integers(-12, 0)))
        container[key] = data.draw(st.sampled_from(["a", "é", "\n", "\\"])) * size
    line = jt.dump_value(obj).encode()
    both_parse(line)
    native = outcome(lambda: _message.encode_message_dict(obj))
    with pure():
        assert native == outcome(lambda: _message.encode_message_dict(obj))
    wire_only = NATIVE.encode(obj)
    if wire_only is not None:
        assert NATIVE.encode_with_text(obj) == (wire_only, NATIVE.decode_text(wire_only))
        assert NATIVE.encode_text(line) in (None, wire_only)


@PROFILE
@given(envelopes(), st.data())
def test_lines_with_a_wrong_value_agree(obj: dict[str, Any], data: st.DataObject) -> None:
    """One value anywhere in the payload replaced by an arbitrary JSON value."""
    payload = obj.get("payload")
    if isinstance(payload, dict) and payload:
        key = data.draw(st.sampled_from(sorted(payload)))
        payload[key] = data.draw(json_values)
    both_parse(jt.dump_value(obj).encode())


@PROFILE
@given(messages(omni_pb2.OmniMessage.DESCRIPTOR))
def test_arbitrary_messages_agree(msg: omni_pb2.OmniMessage) -> None:
    both_serialize(msg)


def mutations(data: bytes, rng: random.Random) -> Iterator[bytes]:
    for _ in range(12):
        b = bytearray(data)
        op = rng.randrange(4)
        if op == 0 and b:
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        elif op == 1:
            b = b[: rng.randrange(len(b) + 1)]
        elif op == 2:
            at = rng.randrange(len(b) + 1)
            b[at:at] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 6)))
        elif b:
            b[rng.randrange(len(b))] = rng.choice([0x00, 0x7F, 0x80, 0xFF, 0xC0, 0xED])
        yield bytes(b)


def test_mutated_wire_bytes_agree() -> None:
    """Whatever the native decoder accepts, the Python codec writes the same
    line for; anything else it declines (never a crash, never other bytes)."""
    assert NATIVE is not None
    rng = random.Random(12)
    accepted = 0
    for line in corpus_lines():
        try:
            with pure():
                body = wire(parse_message(line))
        except ConversionError:
            continue
        for mutated in mutations(body, rng):
            native = NATIVE.decode(mutated)
            try:
                msg = omni_pb2.OmniMessage.FromString(mutated)
            except Exception:
                assert native is None, mutated
                assert NATIVE.decode_text(mutated) is None, mutated
                continue
            both_serialize(msg)
            if native is not None:
                accepted += 1
                with pure():
                    assert jt.dumps(native) == serialize_message(msg)
            text = NATIVE.decode_text(mutated)
            if text is not None:
                # straight from the bytes, not from upb's re-serialization
                with pure():
                    assert text == serialize_message(msg)
    assert accepted > 0


def test_native_output_is_what_the_python_fast_path_gives() -> None:
    """A line the native path takes gives a message equal to the Python one,
    and the 64 MiB limit still refuses longer lines first."""
    line = (
        b'{"timestamp":"t","type":"model_msg","payload":{"type":"text","role":"user","text":"hi"}}'
    )
    assert NATIVE is not None and NATIVE.encode(orjson.loads(line)) is not None
    both_parse(line)
    with pytest.raises(ConversionError, match="over the 40-byte limit"):
        parse_message(line, max_bytes=40)


# ---- the text paths: any spelling of a message, and whole traces ----------


def spelled(value: Any, rng: random.Random) -> str:
    """Another JSON spelling of ``value``: whitespace, escapes, number forms,
    reordered or repeated keys. The Python codec decides what each means; the
    native one must agree or decline."""
    ws = rng.choice(["", "", "", "", " ", "\n", "\t ", "\r\n"])
    if isinstance(value, dict):
        items = list(value.items())
        if items and rng.randrange(10) == 0:
            items.reverse()
        if items and rng.randrange(10) == 0:
            items.append(rng.choice(items))
        inner = ",".join(f"{ws}{spelled(str(k), rng)}{ws}:{spelled(v, rng)}" for k, v in items)
        return ws + "{" + inner + ws + "}" + ws
    if isinstance(value, list):
        return ws + "[" + ",".join(spelled(v, rng) for v in value) + "]" + ws
    if isinstance(value, str):
        out = []
        for ch in value:
            how = rng.randrange(12)
            if how == 0 and ord(ch) < 0x10000:
                out.append(f"\\u{ord(ch):04X}" if rng.randrange(2) else f"\\u{ord(ch):04x}")
            elif how == 1 and ch == "/":
                out.append("\\/")
            elif how == 2 and ord(ch) >= 0x10000:
                code = ord(ch) - 0x10000
                out.append(f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}")
            else:
                out.append(jt.string_text(ch)[1:-1])
        return '"' + "".join(out) + '"'
    if type(value) is int:
        form = rng.randrange(12)
        if form == 0:
            return f"{value}.0"
        if form == 1:
            return f"{value}e0"
        if form == 2 and value == 0:
            return "-0"
        return str(value)
    return jt.dump_value(value)


@PROFILE
@given(envelopes(), st.randoms(use_true_random=False))
def test_any_spelling_agrees(obj: dict[str, Any], rng: random.Random) -> None:
    both_parse(spelled(obj, rng).encode())


@PROFILE
@given(envelopes() | odd_envelopes(), st.randoms(use_true_random=False))
def test_odd_shapes_and_number_spellings_agree(obj: dict[str, Any], rng: random.Random) -> None:
    """Issue 28's classes: empty and unknown kinds and envelope types, and
    numbers JavaScript never writes (``1.0``, ``-0``, Python float text),
    as text and as an already parsed object, parsed and written back."""
    text = respelled(obj, rng).encode()
    both_parse(text)
    parsed = jt.loads(text)
    native = outcome(lambda: wire(message_from_dict(parsed)))
    with pure():
        reference = outcome(lambda: wire(message_from_dict(parsed)))
    assert native == reference
    if native[0] == "ok":
        both_serialize(omni_pb2.OmniMessage.FromString(native[1]))


def test_spellings_of_the_corpus_agree() -> None:
    """The corpus (which the native path carries) in other spellings."""
    rng = random.Random(3)
    native = 0
    for line in corpus_lines():
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue  # the corpus's malformed lines
        for _ in range(4):
            text = spelled(obj, rng).encode()
            native += NATIVE is not None and NATIVE.encode_text(text) is not None
            both_parse(text)
    assert native > 100  # the native path reads other spellings, not only its own


@PROFILE
@given(st.sampled_from(range(400)), st.data())
def test_mutated_lines_agree(index: int, data: st.DataObject) -> None:
    """Corpus lines with bytes flipped, cut, inserted or replaced."""
    lines = corpus_lines()
    line = bytearray(lines[index % len(lines)])
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(0, len(line)))
        op = data.draw(st.integers(0, 3))
        byte = data.draw(
            st.sampled_from(
                [0x00, 0x20, 0x22, 0x5C, 0x7B, 0x7D, 0x2C, 0x30, 0x80, 0xC3, 0xED, 0xFF]
            )
        )
        if op == 0 and at < len(line):
            line[at] = byte
        elif op == 1:
            del line[at:]
        elif op == 2:
            line[at:at] = bytes([byte])
        elif at < len(line):
            del line[at]
    both_parse(bytes(line))


def convert_both(work: Callable[[], Any]) -> None:
    native = outcome(work)
    with pure():
        reference = outcome(work)
    assert native == reference


def jsonl_outcome(text: bytes, tolerant: bool, max_line_bytes: int) -> Callable[[], Any]:
    def work() -> Any:
        skips: list[Any] = []
        sink = io.BytesIO()
        count = trace_convert.jsonl_to_binpb(
            io.BytesIO(text),
            sink,
            tolerant=tolerant,
            on_skip=skips.append,
            max_line_bytes=max_line_bytes,
        )
        return count, sink.getvalue(), skips

    return work


LINE_NOISE = [b"", b"   ", b"\r", b"\xc2\xa0", b"\xef\xbb\xbf", b"not json", b"{}", b"\xff"]


@PROFILE
@given(
    st.lists(st.integers(0, 10_000), min_size=1, max_size=30),
    st.lists(st.sampled_from(LINE_NOISE), min_size=1, max_size=30),
    st.booleans(),
    st.booleans(),
    st.sampled_from([64, 300, 64 * 1024 * 1024]),
)
def test_jsonl_to_binpb_agrees(
    picks: list[int], noise: list[bytes], tolerant: bool, torn: bool, limit: int
) -> None:
    """Whole traces: corpus lines among blank, padded, malformed and oversized
    lines, with or without a torn tail: same frames, same skips, same error."""
    lines = corpus_lines()
    out = []
    for i, pick in enumerate(picks):
        extra = noise[i % len(noise)]
        line = lines[pick % len(lines)]
        out.append(extra + line + extra if pick % 3 else extra)
        out.append(line)
    text = b"\n".join(out) + (b"" if torn else b"\n")
    convert_both(jsonl_outcome(text, tolerant, limit))


def test_jsonl_to_binpb_of_the_corpus_is_native_and_identical() -> None:
    text = b"\n".join(corpus_lines()) + b"\n"
    convert_both(jsonl_outcome(text, True, 64 * 1024 * 1024))
    assert NATIVE is not None
    _, stop, records = NATIVE.jsonl_to_binpb(text, 0, 1 << 26, 0)
    assert records > 0 and stop > 0


def binpb_outcome(data: bytes, max_frame_bytes: int = 64 * 1024 * 1024) -> Callable[[], Any]:
    def work() -> Any:
        sink = io.BytesIO()
        try:
            count = trace_convert.binpb_to_jsonl(
                io.BytesIO(data), sink, max_frame_bytes=max_frame_bytes
            )
        except ConversionError as exc:
            # what was written before the error must agree too
            return "error", type(exc).__name__, str(exc), sink.getvalue()
        return count, sink.getvalue()

    return work


def frames_of(bodies: list[bytes]) -> bytes:
    return b"".join(encode_varint(len(body)) + body for body in bodies)


def corpus_bodies() -> list[bytes]:
    bodies = []
    for line in corpus_lines():
        try:
            with pure():
                bodies.append(wire(parse_message(line)))
        except ConversionError:
            continue
    return bodies


def test_binpb_to_jsonl_agrees_on_mutated_frames() -> None:
    rng = random.Random(7)
    bodies = corpus_bodies()
    convert_both(binpb_outcome(frames_of(bodies)))
    for _ in range(300):
        chosen = [rng.choice(bodies) for _ in range(rng.randrange(1, 8))]
        at = rng.randrange(len(chosen))
        chosen[at] = next(mutations(chosen[at], rng))
        data = frames_of(chosen)
        if rng.randrange(4) == 0:
            data = data[: rng.randrange(len(data) + 1)]  # a truncated stream
        convert_both(binpb_outcome(data, rng.choice([40, 64 * 1024 * 1024])))


def test_compressed_records_agree() -> None:
    """Large records stored compressed (zlib_record), from JSONL and back,
    and mutated: the same frames, lines and errors on both paths."""
    import sys

    sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
    from sizes import STYLES, style_lines

    lines = [line for style in STYLES for line in style_lines(style, 2, 3)]
    text = b"\n".join(lines) + b"\n"
    convert_both(jsonl_outcome(text, False, 64 * 1024 * 1024))
    sink = io.BytesIO()
    trace_convert.jsonl_to_binpb(io.BytesIO(text), sink, compress=True)
    data = sink.getvalue()
    convert_both(binpb_outcome(data))
    rng = random.Random(11)
    for _ in range(200):
        cut = bytearray(data)
        for _ in range(rng.randrange(1, 4)):
            cut[rng.randrange(len(cut))] = rng.randrange(256)
        convert_both(binpb_outcome(bytes(cut), rng.choice([400, 64 * 1024 * 1024])))


def test_default_form_records_agree() -> None:
    """The default .binpb form (fidelity's long base64 as base64_values, tool
    lists in the marked form), from JSONL and back, and mutated: the same
    frames, lines and errors on both paths (issue 28)."""
    import sys

    sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
    from fuzz import default_form
    from sizes import STYLES, style_lines

    lines = [line for style in STYLES for line in style_lines(style, 2, 5)]
    lines += default_form.LINES
    text = b"\n".join(lines) + b"\n"
    convert_both(jsonl_outcome(text, False, 64 * 1024 * 1024))
    sink = io.BytesIO()
    trace_convert.jsonl_to_binpb(io.BytesIO(text), sink)
    data = sink.getvalue()
    convert_both(binpb_outcome(data))
    for seed in default_form.frames().values():
        convert_both(binpb_outcome(seed))
    rng = random.Random(13)
    for _ in range(200):
        cut = bytearray(data)
        for _ in range(rng.randrange(1, 4)):
            cut[rng.randrange(len(cut))] = rng.randrange(256)
        convert_both(binpb_outcome(bytes(cut), rng.choice([400, 64 * 1024 * 1024])))


def test_repeated_singular_fields_agree() -> None:
    """Wire bytes that set a field twice (protobuf merges them: the last
    scalar wins, messages merge), inside the payload and in the envelope."""
    rng = random.Random(5)
    by_arm: dict[str, list[omni_pb2.OmniMessage]] = {}
    for body in corpus_bodies():
        msg = omni_pb2.OmniMessage.FromString(body)
        arm = msg.WhichOneof("payload")
        if arm is not None:
            by_arm.setdefault(arm, []).append(msg)
    envelope = omni_pb2.OmniMessage.DESCRIPTOR.fields_by_name
    checked = 0
    for arm, msgs in by_arm.items():
        number = envelope[arm].number
        for _ in range(20):
            a, b = rng.choice(msgs), rng.choice(msgs)
            inner = getattr(a, arm).SerializeToString() + getattr(b, arm).SerializeToString()
            body = encode_varint((number << 3) | 2) + encode_varint(len(inner)) + inner
            for data in (body, wire(a) + wire(b), body + wire(b)):
                convert_both(binpb_outcome(frames_of([data])))
                checked += 1
    assert checked > 100


@pytest.mark.parametrize(
    "bad", [b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xe0\x80\x80", b"\xf4\x90\x80\x80"]
)
@pytest.mark.parametrize("where", ["before an escape", "after an escape", "alone", "in a key"])
def test_invalid_utf8_anywhere_in_a_string_agrees(bad: bytes, where: str) -> None:
    """Found by the fuzzer: bytes that are not UTF-8 before an escape in the
    same string were copied unchecked (upb then refused the message)."""
    text = {
        "before an escape": b"a" + bad + b"b\\nc",
        "after an escape": b"a\\n" + bad + b"c",
        "alone": b"a" + bad,
        "in a key": b"a",
    }[where]
    key = b"te" + bad + b"\\u0078t" if where == "in a key" else b"text"
    line = (
        b'{"timestamp":"t","type":"model_msg","payload":{"type":"text","role":"user","'
        + key
        + b'":"'
        + text
        + b'"}}'
    )
    both_parse(line)
    assert NATIVE is not None and NATIVE.encode_text(line) is None
