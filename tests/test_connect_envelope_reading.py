"""Request bodies read as they arrive (``transport/connect/envelope``): however
the body is cut into chunks, gRPC-Web-text's base64 runs decode to what one
decoding of the whole body gives, and the one enveloped message comes out
the same; a second envelope, or one larger than the limit, is refused as
soon as its header is in."""

from __future__ import annotations

import base64
import binascii
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from omni_grpc.transport.connect.envelope import (
    Base64Runs,
    EnvelopeError,
    EnvelopeTooLarge,
    MessageCount,
    SingleMessage,
)

PROFILE = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
WHITESPACE = st.sampled_from([b"", b" ", b"\n", b"\r\n", b"\t", b"\x0b\x0c"])


def cut(data: bytes, points: list[int]) -> list[bytes]:
    """``data`` in chunks, cut at ``points`` (any positions, sorted here)."""
    edges = sorted({min(p, len(data)) for p in points})
    out, start = [], 0
    for edge in edges:
        out.append(data[start:edge])
        start = edge
    return [*out, data[start:]]


def envelope(data: bytes, flags: int = 0) -> bytes:
    return struct.pack(">BI", flags, len(data)) + data


@PROFILE
@given(
    st.lists(st.binary(max_size=40), max_size=5),
    st.lists(st.integers(0, 300), max_size=12),
    st.data(),
)
def test_base64_runs_decode_the_same_however_cut(
    messages: list[bytes], points: list[int], data: st.DataObject
) -> None:
    """Each message encoded on its own (padded runs, as clients send them),
    whitespace between and inside, cut anywhere."""
    text = b""
    for message in messages:
        encoded = base64.b64encode(message)
        at = data.draw(st.integers(0, len(encoded)), label="space at")
        text += encoded[:at] + data.draw(WHITESPACE) + encoded[at:] + data.draw(WHITESPACE)
    runs = Base64Runs()
    out = b"".join(runs.feed(chunk) for chunk in cut(text, points))
    runs.finish()
    assert out == b"".join(messages)


@PROFILE
@given(st.binary(min_size=1, max_size=60), st.lists(st.integers(0, 100), max_size=6), st.data())
def test_broken_base64_is_refused_however_cut(
    message: bytes, points: list[int], data: st.DataObject
) -> None:
    encoded = base64.b64encode(message)
    broken = data.draw(
        st.sampled_from(
            [
                encoded[:-1] if len(encoded) % 4 == 0 else encoded + b"A",  # an incomplete group
                encoded[:1] + b"*" + encoded[2:],  # not the alphabet
                encoded + b"=",  # stray padding
            ]
        ),
        label="broken",
    )
    try:  # what one strict decoding of the whole says
        binascii.a2b_base64(broken, strict_mode=True)
    except binascii.Error:
        pass
    else:
        return  # (dropping a character can leave valid base64)
    runs = Base64Runs()
    with pytest.raises(EnvelopeError):
        for chunk in cut(broken, points):
            runs.feed(chunk)
        runs.finish()


@PROFILE
@given(st.binary(max_size=200), st.sampled_from([0, 1]), st.lists(st.integers(0, 210)))
def test_one_envelope_comes_out_whole_however_cut(
    message: bytes, flags: int, points: list[int]
) -> None:
    reader = SingleMessage(limit=200)
    for chunk in cut(envelope(message, flags), points):
        reader.feed(chunk)
    got = reader.finish()
    assert (got.flags, got.data) == (flags, message)


@PROFILE
@given(st.binary(max_size=50), st.binary(max_size=50), st.lists(st.integers(0, 120)))
def test_a_second_envelope_is_refused_once_its_header_is_in(
    first: bytes, second: bytes, points: list[int]
) -> None:
    body = envelope(first) + envelope(second)
    second_header_end = 2 * 5 + len(first)
    reader = SingleMessage(limit=100)
    before = after = 0
    with pytest.raises(MessageCount):
        for chunk in cut(body, points):
            before, after = after, after + len(chunk)
            reader.feed(chunk)
    # Refused by the chunk that completed the second envelope's header.
    assert before < second_header_end <= after


@PROFILE
@given(st.integers(101, 1 << 31), st.lists(st.integers(0, 10)))
def test_an_envelope_past_the_limit_is_refused_from_its_header(
    length: int, points: list[int]
) -> None:
    reader = SingleMessage(limit=100)
    with pytest.raises(EnvelopeTooLarge):
        for chunk in cut(struct.pack(">BI", 0, length), points):
            reader.feed(chunk)


@pytest.mark.parametrize(
    ("body", "error", "why"),
    [
        (b"", MessageCount, "empty"),
        (b"\0\0", EnvelopeError, "shorter than an envelope"),
        (envelope(b"abc")[:-1], EnvelopeError, "truncated"),
        (envelope(b"abc") + b"\0\0", EnvelopeError, "too few for another"),
        (envelope(b"abc", flags=0x80), EnvelopeError, "unknown flags"),
    ],
)
def test_what_is_not_one_envelope_is_named(body: bytes, error: type[Exception], why: str) -> None:
    reader = SingleMessage(limit=100)
    reader.feed(body)
    with pytest.raises(error, match=why):
        reader.finish()
