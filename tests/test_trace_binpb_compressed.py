""".binpb records stored compressed (``zlib_record``): written for a large
record it makes smaller, read back byte for byte, readable with nothing but
protobuf and zlib, and every malformed one refused naming its record."""

from __future__ import annotations

import io
import sys
import zlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from omni_grpc.convert import ConversionError, parse_message, serialize_message
from omni_grpc.convert._base64 import pack as pack_base64
from omni_grpc.trace import FrameError, read_binpb, write_binpb
from omni_grpc.trace.binpb import COMPRESS_FROM, MARK, encode_frame, encode_varint
from omni_grpc.trace.convert import binpb_to_jsonl, jsonl_to_binpb
from omni_grpc_proto.omni.v1.omni_pb2 import OmniMessage

sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
from _common import corpus_lines  # benchmarks/_common.py
from sizes import STYLES, style_lines  # benchmarks/sizes.py: its traces

CLI = str(Path(sys.executable).with_name("omni-grpc"))


def frames(data: bytes) -> list[bytes]:
    """The bodies of a delimited stream, read the way any protobuf reader does."""
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


def back(data: bytes, **kw: int) -> list[bytes]:
    return [serialize_message(r.message) for r in read_binpb(io.BytesIO(data), **kw)]


@pytest.mark.parametrize("style", STYLES)
def test_every_provider_style_is_under_0_8_of_its_jsonl(style: str) -> None:
    """Issue 28's goal, on the benchmark's own traces (fewer turns)."""
    lines = style_lines(style, 8, 1)
    data = to_binpb(lines, compress=True)
    assert back(data) == lines
    jsonl = sum(len(line) + 1 for line in lines)
    assert len(data) < 0.8 * jsonl, (style, len(data) / jsonl)


def test_large_records_are_stored_compressed_small_ones_plain() -> None:
    """When asked: compression is opt-in (a stub-only reader cannot inflate)."""
    lines = style_lines("openai", 3, 1)
    data = to_binpb(lines, compress=True)
    bodies = frames(data)
    assert len(bodies) == len(lines)
    wrapped = 0
    for line, body in zip(lines, bodies, strict=True):
        # the record as stored uncompressed: base64 as bytes (test_trace_binpb_base64.py)
        plain = pack_base64(parse_message(line)).SerializeToString(deterministic=True)
        record = OmniMessage.FromString(body)
        if record.zlib_record:
            wrapped += 1
            # protobuf and the standard zlib are all a reader needs
            assert [f.name for f, _ in record.ListFields()] == ["zlib_record"]
            assert zlib.decompress(record.zlib_record) == plain
            assert len(body) < len(plain) and len(plain) >= COMPRESS_FROM
        else:
            assert body == plain
    assert wrapped >= 3  # each turn's reasoning line at least


@pytest.mark.parametrize("kw", [{}, {"compress": False}], ids=["default", "compress=False"])
def test_by_default_no_record_is_compressed(kw: dict[str, bool]) -> None:
    """A reader built from the generated stubs alone reads every record: each
    frame is the record itself (its base64 as bytes, a typed field)."""
    lines = style_lines("openai-reasoning", 3, 1)
    data = to_binpb(lines, **kw)
    stored = [
        pack_base64(parse_message(line)).SerializeToString(deterministic=True) for line in lines
    ]
    assert frames(data) == stored
    assert not any(OmniMessage.FromString(body).zlib_record for body in frames(data))
    assert back(data) == lines


def test_plain_writes_the_records_as_the_codec_gives_them() -> None:
    """``plain=True``: the form readers built from older stubs read whole."""
    lines = style_lines("openai-reasoning", 3, 1)
    data = to_binpb(lines, plain=True)
    assert frames(data) == [
        parse_message(line).SerializeToString(deterministic=True) for line in lines
    ]
    assert back(data) == lines


def test_the_batch_converter_writes_the_same_bytes_as_write_binpb() -> None:
    lines = [line for style in STYLES for line in style_lines(style, 3, 2)]
    text = b"\n".join(lines) + b"\n"
    for compress in (True, False):
        sink = io.BytesIO()
        assert jsonl_to_binpb(io.BytesIO(text), sink, compress=compress) == len(lines)
        assert sink.getvalue() == to_binpb(lines, compress=compress)
        out = io.BytesIO()
        binpb_to_jsonl(io.BytesIO(sink.getvalue()), out)
        assert out.getvalue() == text


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=3000), st.integers(0, 40))
def test_any_text_round_trips_compressed_or_not(text: str, turns: int) -> None:
    """Whatever a record holds, stored compressed or plain, it reads back as
    the same message, from both readers."""
    msg = OmniMessage(timestamp="t")
    msg.text.text = text * (turns % 4 + 1)
    for compress in (True, False):
        data = encode_frame(msg, compress=compress)
        assert [r.message for r in read_binpb(io.BytesIO(data))] == [msg]
        out = io.BytesIO()
        binpb_to_jsonl(io.BytesIO(data), out)
        assert out.getvalue() == serialize_message(msg) + b"\n"


def frame(record: OmniMessage) -> bytes:
    body = record.SerializeToString()
    return encode_varint(len(body)) + body


GOOD = frame(parse_message(style_lines("openai-reasoning", 1, 1)[1]))
INNER = parse_message(style_lines("openai-reasoning", 1, 1)[2]).SerializeToString()
BAD = {
    "not zlib": (OmniMessage(zlib_record=b"\x00not zlib"), "is not valid zlib data"),
    "truncated stream": (
        OmniMessage(zlib_record=zlib.compress(INNER)[:-9]),
        "is not one complete zlib stream",
    ),
    "data after the stream": (
        OmniMessage(zlib_record=zlib.compress(INNER) + b"x"),
        "is not one complete zlib stream",
    ),
    "beside other fields": (
        OmniMessage(zlib_record=zlib.compress(INNER), timestamp="t"),
        "holds other fields too",
    ),
    "not a message inside": (
        OmniMessage(zlib_record=zlib.compress(b"\xff\xff\xff")),
        "the inflated record is not a valid OmniMessage",
    ),
    "compressed twice": (
        OmniMessage(
            zlib_record=zlib.compress(
                OmniMessage(zlib_record=zlib.compress(INNER)).SerializeToString()
            )
        ),
        "a compressed record inside another one",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_compressed_record_is_named_by_record_and_offset(case: str) -> None:
    record, reason = BAD[case]
    data = GOOD + frame(record)
    for read in (
        lambda: list(read_binpb(io.BytesIO(data))),
        lambda: binpb_to_jsonl(io.BytesIO(data), io.BytesIO()),
    ):
        with pytest.raises(FrameError) as caught:
            read()
        assert caught.value.record == 2 and caught.value.offset == len(GOOD)
        assert reason in str(caught.value)


def test_a_record_cannot_inflate_past_the_frame_limit() -> None:
    """A small frame that inflates to more than the limit (a zip bomb) is
    refused without inflating it whole."""
    msg = OmniMessage(timestamp="t")
    msg.text.text = "a" * 100_000
    data = encode_frame(msg, compress=True)
    assert len(data) < 1_000
    with pytest.raises(FrameError, match="inflates past the 50000-byte frame limit"):
        list(read_binpb(io.BytesIO(data), max_frame_bytes=50_000))
    with pytest.raises(FrameError, match="inflates past the 50000-byte frame limit"):
        binpb_to_jsonl(io.BytesIO(data), io.BytesIO(), max_frame_bytes=50_000)
    assert back(data, max_frame_bytes=200_000) == [serialize_message(msg)]


def test_the_codec_refuses_a_compressed_record() -> None:
    """serialize_message takes messages, not stored records: a zlib_record
    is a clear error, never JSON written from half a message."""
    for msg in (
        OmniMessage(zlib_record=zlib.compress(INNER)),
        OmniMessage(zlib_record=b"x", timestamp="t", request_begin={}),
    ):
        with pytest.raises(ConversionError, match="inflate it first"):
            serialize_message(msg)


def test_cli_convert_writes_compressed_and_plain(tmp_path: Path) -> None:
    import subprocess

    lines = style_lines("schema-heavy", 2, 1)
    source = tmp_path / "in.jsonl"
    source.write_bytes(b"\n".join(lines) + b"\n")
    # by default the tool list is stored in the marked form (test_trace_binpb_schemas.py)
    cases = [([], "marked"), (["--compress"], "zlib_record"), (["--plain"], None)]
    cases.append((["--no-compress"], "marked"))
    for flags, form in cases:
        out = tmp_path / "out.binpb"
        done = subprocess.run(
            [CLI, "convert", str(source), str(out), *flags], capture_output=True, check=False
        )
        assert done.returncode == 0, done.stderr
        data = out.read_bytes()
        assert (len(data) < 0.5 * source.stat().st_size) is (form is not None)
        assert any(body[:1] == MARK for body in frames(data)) is (form == "marked")
        zlibbed = any(OmniMessage.FromString(b).zlib_record for b in frames(data) if b[:1] != MARK)
        assert zlibbed is (form == "zlib_record")
        again = tmp_path / "again.jsonl"
        done = subprocess.run(
            [CLI, "convert", str(out), str(again)], capture_output=True, check=False
        )
        assert done.returncode == 0, done.stderr
        assert again.read_bytes() == source.read_bytes()
    bad = tmp_path / "bad.binpb"
    bad.write_bytes(GOOD + frame(BAD["not zlib"][0]))
    done = subprocess.run(
        [CLI, "convert", str(bad), str(tmp_path / "x.jsonl")], capture_output=True, check=False
    )
    assert done.returncode == 1
    assert b"record 2 at byte offset" in done.stderr and b"not valid zlib data" in done.stderr


def test_the_c_code_picks_the_frames_the_python_walk_picks(monkeypatch: pytest.MonkeyPatch) -> None:
    """``frames_of_arms`` (the C code's pick of the records the default form
    may rewrite: by arm, size and held field) agrees with the Python walk it
    replaces, on every style's records and on truncated blocks."""
    from omni_grpc.convert._native import NATIVE
    from omni_grpc.trace import binpb

    if NATIVE is None:
        pytest.skip("no native codec")
    lines = [line for style in STYLES for line in style_lines(style, 3, 3)]
    block = b"".join(frame(parse_message(line)) for line in [*lines, *corpus_lines()])
    pick = binpb._DEFAULT_FORM
    native = NATIVE.frames_of_arms(block, pick.least_bytes, pick.holding_bytes)
    monkeypatch.setattr(binpb, "NATIVE", None)
    assert native == binpb._spans(block, pick)
    assert {arm for _, _, arm in native} >= {6, 10, 11, 25}  # images, arguments, tools
    for cut in range(0, len(block), 997):  # a torn block: the list stops at the tear
        torn = NATIVE.frames_of_arms(block[:cut], pick.least_bytes, pick.holding_bytes)
        assert torn == [span for span in native if span[1] <= cut]
