"""Records of tool definitions (their JSON Schemas) stored compressed by
default in the marked form: a 0x00 byte, then the zlib stream of the record.
Readers here inflate it; a reader built from the stubs alone fails on it
(field number 0 is refused by every protobuf parser) instead of reading a
message with nothing in it; ``plain=True`` writes the record itself."""

from __future__ import annotations

import io
import sys
import zlib
from pathlib import Path
from typing import Any

import pytest
from google.protobuf.message import DecodeError
from hypothesis import given, settings
from hypothesis import strategies as st

from omni_grpc.convert import parse_message, serialize_message
from omni_grpc.convert._jsontext import dump_value
from omni_grpc.trace import FrameError, read_binpb, write_binpb
from omni_grpc.trace.binpb import MARK, MARK_FROM, encode_varint
from omni_grpc.trace.convert import binpb_to_jsonl, jsonl_to_binpb
from omni_grpc_proto.omni.v1.omni_pb2 import OmniMessage

sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
from sizes import style_lines  # benchmarks/sizes.py: its traces


def frames(data: bytes) -> list[bytes]:
    from google.protobuf.internal.decoder import _DecodeVarint

    out, pos = [], 0
    while pos < len(data):
        length, pos = _DecodeVarint(data, pos)
        out.append(data[pos : pos + length])
        pos += length
    return out


def to_binpb(lines: list[bytes], **kw: bool) -> bytes:
    sink = io.BytesIO()
    write_binpb((parse_message(line) for line in lines), sink, **kw)
    return sink.getvalue()


def back(data: bytes) -> list[bytes]:
    return [serialize_message(r.message) for r in read_binpb(io.BytesIO(data))]


def test_schema_heavy_traces_are_under_0_8_by_default() -> None:
    """Issue 28: schema-heavy traces were 0.91 of their JSONL."""
    lines = style_lines("schema-heavy", 8, 1)
    data = to_binpb(lines)
    assert back(data) == lines
    jsonl = sum(len(line) + 1 for line in lines)
    assert len(data) < 0.8 * jsonl, len(data) / jsonl
    assert len(to_binpb(lines, plain=True)) > 0.85 * jsonl  # what plain gives


def test_only_records_of_tool_definitions_are_marked() -> None:
    lines = style_lines("schema-heavy", 3, 1)
    for line, body in zip(lines, frames(to_binpb(lines)), strict=True):
        msg = parse_message(line)
        arm = msg.WhichOneof("payload")
        if body[:1] == MARK:
            assert arm == "tool_list_ready"
            stored = zlib.decompress(body[1:])  # protobuf and zlib are all it takes
            assert OmniMessage.FromString(stored) == msg
            # the reader that does not know the form fails, it does not read nothing
            with pytest.raises(DecodeError):
                OmniMessage.FromString(body)
        else:
            assert arm != "tool_list_ready" or len(body) < MARK_FROM
            OmniMessage.FromString(body)


def test_the_batch_converter_writes_the_same_bytes_both_ways() -> None:
    lines = style_lines("schema-heavy", 3, 2) + style_lines("openai", 2, 2)
    text = b"\n".join(lines) + b"\n"
    for kw in ({}, {"plain": True}, {"compress": True}):
        sink = io.BytesIO()
        assert jsonl_to_binpb(io.BytesIO(text), sink, **kw) == len(lines)
        assert sink.getvalue() == to_binpb(lines, **kw), kw
        out = io.BytesIO()
        binpb_to_jsonl(io.BytesIO(sink.getvalue()), out)
        assert out.getvalue() == text


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**60), 2**60) | st.text(max_size=40),
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=12), inner, max_size=6)
    ),
    max_leaves=40,
)


@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.text(max_size=30), st.dictionaries(st.text(max_size=12), json_values, max_size=8)
        ),
        min_size=1,
        max_size=12,
    )
)
def test_any_tool_list_round_trips(tools: list[tuple[str, dict[str, Any]]]) -> None:
    listing = [
        {"name": name, "description": "d" * 40, "parameters": params} for name, params in tools
    ]
    payload = {"type": "tool_list_ready", "tools": listing}
    line = dump_value(
        {"timestamp": "2026-01-02T03:04:05.000Z", "type": "event_msg", "payload": payload}
    ).encode()
    line = serialize_message(parse_message(line))  # the codec's spelling of it
    for kw in ({}, {"plain": True}):
        data = to_binpb([line], **kw)
        assert back(data) == [line]
        out = io.BytesIO()
        binpb_to_jsonl(io.BytesIO(data), out)
        assert out.getvalue() == line + b"\n"


def record(body: bytes) -> bytes:
    return encode_varint(len(body)) + body


GOOD = parse_message(style_lines("schema-heavy", 0, 1)[1]).SerializeToString(deterministic=True)


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (MARK + b"not zlib", "the marked record is not valid zlib data"),
        (MARK + zlib.compress(GOOD)[:-3], "not one complete zlib stream"),
        (MARK + zlib.compress(GOOD) + b"x", "not one complete zlib stream"),
        (MARK + zlib.compress(b"\xff\xff"), "the inflated record is not a valid OmniMessage"),
        (MARK + zlib.compress(MARK + zlib.compress(GOOD)), "a compressed record inside another"),
        (
            MARK + zlib.compress(OmniMessage(zlib_record=zlib.compress(GOOD)).SerializeToString()),
            "a compressed record inside another",
        ),
    ],
)
def test_a_bad_marked_record_is_named_by_record_and_offset(body: bytes, reason: str) -> None:
    first = record(OmniMessage(timestamp="t", request_begin={}).SerializeToString())
    data = first + record(body)
    with pytest.raises(FrameError, match=reason) as caught:
        list(read_binpb(io.BytesIO(data)))
    assert (caught.value.record, caught.value.offset) == (2, len(first))
    with pytest.raises(FrameError, match=reason):
        binpb_to_jsonl(io.BytesIO(data), io.BytesIO())


def test_a_marked_record_cannot_inflate_past_the_frame_limit() -> None:
    data = record(MARK + zlib.compress(b"\x00" * 5000))
    with pytest.raises(FrameError, match="inflates past the 4096-byte frame limit"):
        list(read_binpb(io.BytesIO(data), max_frame_bytes=4096))
