""".binpb: delimited framing, byte-identical round trips, clear frame errors."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from google.protobuf.internal.decoder import _DecodeVarint  # the reference varint reader
from google.protobuf.message import DecodeError

from omni_grpc.trace import FrameError, read_binpb, read_jsonl, write_binpb, write_jsonl
from omni_grpc.trace.binpb import MARK, MARK_FROM, encode_varint
from omni_grpc_proto.omni.v1.omni_pb2 import OmniMessage

CORPUS = Path(__file__).parent / "conformance"
JSONL_FILES = sorted(
    p for p in CORPUS.glob("*.jsonl") if "torn" not in p.name and not p.name.startswith("docs_")
)


@pytest.mark.parametrize("path", JSONL_FILES, ids=lambda p: p.name)
def test_jsonl_binpb_jsonl_is_byte_identical(path: Path) -> None:
    binpb = io.BytesIO()
    count = write_binpb((r.message for r in read_jsonl(path)), binpb)
    binpb.seek(0)
    records = list(read_binpb(binpb))
    assert [r.line for r in records] == list(range(1, count + 1))
    back = io.BytesIO()
    write_jsonl((r.message for r in records), back)
    assert back.getvalue() == path.read_bytes()
    # And binpb -> binpb is stable.
    again = io.BytesIO()
    write_binpb((r.message for r in records), again)
    assert again.getvalue() == binpb.getvalue()


@pytest.mark.parametrize("plain", [True, False], ids=["plain", "default"])
def test_framing_is_the_standard_delimited_format(plain: bool) -> None:
    """Each record is varint(len) + the message bytes, as parseDelimitedFrom
    reads it; by default a record of tool definitions is stored compressed
    in the marked form, which a stub-only parser refuses (never reads as an
    empty message), and ``plain`` writes it as the message too."""
    buf = io.BytesIO()
    messages = [r.message for r in read_jsonl(CORPUS / "trace_basic_tool_turn_001.jsonl")]
    # its tool list is under MARK_FROM, kept plain; one of 40 tools is not
    large = OmniMessage(timestamp="2026-01-02T03:04:05.000Z")
    for n in range(40):
        large.tool_list_ready.tools.add(name=f"tool_{n}", description="reads a file " * 3)
    assert large.ByteSize() >= MARK_FROM
    write_binpb([*messages, large], buf, plain=plain)
    data = buf.getvalue()
    pos, n, marked = 0, 0, 0
    while pos < len(data):
        size, pos = _DecodeVarint(data, pos)
        body = data[pos : pos + size]
        if body[:1] == MARK:
            marked += 1
            with pytest.raises(DecodeError):
                OmniMessage.FromString(body)
        else:
            OmniMessage.FromString(body)
        pos += size
        n += 1
    assert pos == len(data) and n == 16
    assert marked == (0 if plain else 1)  # the large tool list


@pytest.mark.parametrize("value", [0, 1, 127, 128, 300, 2**21, 2**63 - 1])
def test_varint_encoding(value: int) -> None:
    assert _DecodeVarint(encode_varint(value), 0) == (value, len(encode_varint(value)))


def _two_records() -> bytes:
    buf = io.BytesIO()
    write_binpb((r.message for r in read_jsonl(CORPUS / "goal_and_steering.jsonl")), buf)
    return buf.getvalue()


def test_truncated_frame_names_record_and_offset() -> None:
    data = _two_records()
    first_len, start = _DecodeVarint(data, 0)
    second_offset = start + first_len
    with pytest.raises(FrameError) as caught:
        list(read_binpb(io.BytesIO(data[: second_offset + 5])))
    assert (caught.value.record, caught.value.offset) == (2, second_offset)
    assert f"record 2 at byte offset {second_offset}: truncated frame" in str(caught.value)


def test_truncated_length_prefix() -> None:
    with pytest.raises(FrameError, match="record 1 at byte offset 0: truncated length prefix"):
        list(read_binpb(io.BytesIO(b"\x80")))


def test_oversized_frame_is_refused_before_reading_it() -> None:
    data = encode_varint(10**12) + b"xx"
    with pytest.raises(FrameError, match="exceeds the"):
        list(read_binpb(io.BytesIO(data)))
    with pytest.raises(FrameError, match="malformed length prefix"):
        list(read_binpb(io.BytesIO(b"\xff" * 11)))


def test_garbage_body_is_a_clear_error() -> None:
    with pytest.raises(FrameError, match="record 1 at byte offset 0: not a valid OmniMessage"):
        list(read_binpb(io.BytesIO(b"\x03\xff\xff\xff")))


def test_empty_stream_has_no_records() -> None:
    assert list(read_binpb(io.BytesIO(b""))) == []
