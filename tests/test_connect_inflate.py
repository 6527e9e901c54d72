"""The gzip inflater of Connect and gRPC-Web requests (``transport/connect/inflate``):
whatever the compression ratio, level and step, a whole member comes back
exactly, a body that is not one whole member is refused, and a bomb is
refused having inflated at most the limit plus one step (nothing at all
when its trailer says how large it is)."""

from __future__ import annotations

import contextlib
import gzip
import struct
import zlib
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from omni_grpc.transport.connect import inflate
from omni_grpc.transport.connect.inflate import InflateError, TooLarge, inflate_gzip

# Payloads of every compression ratio: random bytes (about 1:1), text, long runs (1000:1).
payloads = st.one_of(
    st.binary(max_size=3000),
    st.text(max_size=2000).map(str.encode),
    st.tuples(st.binary(min_size=1, max_size=4), st.integers(0, 100_000)).map(
        lambda t: t[0] * t[1]
    ),
)
levels = st.integers(0, 9)
# Machines under load vary: no per-example deadline (the whole file takes seconds).
PROFILE = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
steps = st.integers(1, 70_000)


def gz(data: bytes, level: int = 6) -> bytes:
    return gzip.compress(data, compresslevel=level, mtime=0)


_DECOMPRESSOBJ = zlib.decompressobj


class Counting:
    """zlib.decompressobj, counting every byte it hands out."""

    inflated = 0

    def __init__(self, wbits: int) -> None:
        self._inner = _DECOMPRESSOBJ(wbits)

    def decompress(self, data: bytes, max_length: int = 0) -> bytes:
        out = self._inner.decompress(data, max_length)
        Counting.inflated += len(out)
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class CountingZlib:
    """What ``inflate`` sees of zlib while a test counts."""

    error = zlib.error
    MAX_WBITS = zlib.MAX_WBITS
    decompressobj = Counting


@contextlib.contextmanager
def counting() -> Iterator[type[Counting]]:
    Counting.inflated = 0
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(inflate, "zlib", CountingZlib)
        yield Counting


@PROFILE
@given(payloads, levels, steps)
def test_a_whole_member_within_the_limit_comes_back_exactly(
    data: bytes, level: int, step: int
) -> None:
    assert inflate_gzip(gz(data, level), len(data), step) == data


@PROFILE
@given(payloads, levels, steps, st.integers(1, 100_000))
def test_a_body_past_the_limit_is_refused_without_inflating(
    data: bytes, level: int, step: int, under: int
) -> None:
    limit = max(0, len(data) - under)
    if len(data) <= limit:
        return
    with counting() as counted, pytest.raises(TooLarge, match=f"declares {len(data)} bytes"):
        inflate_gzip(gz(data, level), limit, step)
    assert counted.inflated == 0  # its trailer said so: refused before any work


@PROFILE
@given(st.integers(1, 20), st.integers(0, 500_000), levels, st.integers(1, 300_000), st.data())
def test_a_lying_bomb_stops_at_what_it_declares(
    seed: int, size: int, level: int, step: int, data: st.DataObject
) -> None:
    """A trailer that declares less than the member holds (a forged ISIZE)
    is refused as soon as the output passes it: at most one step more."""
    payload = bytes([seed]) * size
    body = gz(payload, level)
    declared = data.draw(st.integers(0, max(0, size - 1)), label="declared") if size else 0
    if size == 0:
        return
    limit = data.draw(st.integers(declared, size * 2), label="limit")
    forged = body[:-4] + struct.pack("<I", declared)
    with counting() as counted, pytest.raises(InflateError):
        inflate_gzip(forged, limit, step)
    assert counted.inflated <= declared + 1


@PROFILE
@given(payloads, levels, st.data())
def test_a_body_cut_anywhere_is_refused(data: bytes, level: int, draw: st.DataObject) -> None:
    body = gz(data, level)
    cut = draw.draw(st.integers(0, len(body) - 1), label="cut")
    with pytest.raises(InflateError):
        inflate_gzip(body[:cut], 1 << 30)


@PROFILE
@given(payloads, levels, st.binary(min_size=1, max_size=64))
def test_bytes_after_the_trailer_are_refused(data: bytes, level: int, junk: bytes) -> None:
    with pytest.raises(InflateError):
        inflate_gzip(gz(data, level) + junk, 1 << 30)


@PROFILE
@given(payloads, payloads, levels)
def test_a_second_member_is_refused_not_dropped(first: bytes, second: bytes, level: int) -> None:
    body = gz(first, level) + gz(second, level)
    with pytest.raises(InflateError) as refused:
        inflate_gzip(body, 1 << 30)
    # Named as such whenever the last trailer happens to fit the first member.
    if len(second) == len(first):
        assert "second gzip member" in str(refused.value)


@PROFILE
@given(payloads, levels, st.integers(0, 3), st.integers(1, 255))
def test_a_wrong_checksum_or_length_is_refused(
    data: bytes, level: int, which: int, flip: int
) -> None:
    body = bytearray(gz(data, level))
    body[-8 + which] ^= flip  # a byte of the CRC-32
    with pytest.raises(InflateError, match="incorrect data check"):
        inflate_gzip(bytes(body), 1 << 30)


def test_not_gzip_and_too_short_are_named() -> None:
    with pytest.raises(InflateError, match="not gzip"):
        inflate_gzip(zlib.compress(bytes(range(40))), 100)
    with pytest.raises(InflateError, match="too short"):
        inflate_gzip(b"\x1f\x8b\x08", 100)


def test_the_counter_sees_what_a_whole_member_inflates() -> None:
    """The counter the bomb tests rest on counts real output."""
    with counting() as counted:
        assert inflate_gzip(gz(b"y" * 12_345), 20_000, 1000) == b"y" * 12_345
    assert counted.inflated == 12_345
