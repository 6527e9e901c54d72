"""The chunked .binpb reader against a one-byte-at-a-time reference: any
stream (short reads included), any cut, gives the same records or the same
FrameError (record and offset)."""

from __future__ import annotations

import io

from hypothesis import given, settings
from hypothesis import strategies as st

from omni_grpc.trace import FrameError
from omni_grpc.trace.binpb import _read_frames, encode_varint
from omni_grpc_proto.omni.v1.omni_pb2 import OmniMessage, Text


class Trickle(io.RawIOBase):
    """A raw stream that returns at most ``step`` bytes per read."""

    def __init__(self, data: bytes, step: int) -> None:
        self.data, self.pos, self.step = data, 0, step

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        n = self.step if size < 0 else min(size, self.step)
        chunk = self.data[self.pos : self.pos + n]
        self.pos += len(chunk)
        return chunk


def reference(data: bytes, limit: int) -> list[object]:
    """Frames by reading the varint byte by byte, as the first reader did."""
    out: list[object] = []
    pos, record = 0, 0
    while pos < len(data):
        record += 1
        value, shift, i = 0, 0, pos
        while True:
            if i - pos == 10:
                return [*out, ("error", record, pos)]
            if i == len(data):
                return [*out, ("error", record, pos)]
            byte = data[i]
            i += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                break
        if value > limit or i + value > len(data):
            return [*out, ("error", record, pos)]
        try:
            msg = OmniMessage.FromString(data[i : i + value])
        except Exception:
            return [*out, ("error", record, pos)]
        out.append(msg.SerializeToString())
        pos = i + value
    return out


def ours(data: bytes, step: int, limit: int) -> list[object]:
    out: list[object] = []
    try:
        for rec in _read_frames(Trickle(data, step), limit):  # type: ignore[arg-type]
            out.append(rec.message.SerializeToString())
    except FrameError as exc:
        out.append(("error", exc.record, exc.offset))
    return out


def frames(texts: list[str]) -> bytes:
    parts = []
    for text in texts:
        body = OmniMessage(text=Text(text=text)).SerializeToString()
        parts.append(encode_varint(len(body)) + body)
    return b"".join(parts)


@settings(max_examples=300, deadline=None)
@given(
    texts=st.lists(st.text(max_size=300), max_size=8),
    cut=st.integers(min_value=0, max_value=4000),
    step=st.sampled_from([1, 2, 7, 64, 1 << 20]),
    noise=st.binary(max_size=12),
    limit=st.sampled_from([64, 1 << 20]),
)
def test_chunked_reader_matches_bytewise_reference(
    texts: list[str], cut: int, step: int, noise: bytes, limit: int
) -> None:
    data = frames(texts)
    data = data[: min(cut, len(data))] + noise if cut < len(data) else data + noise
    assert ours(data, step, limit) == reference(data, limit)


def test_frames_larger_than_the_chunk_are_read_whole() -> None:
    big = "x" * (3 * 1024 * 1024)
    data = frames([big, "y"])
    got = ours(data, 1 << 20, 64 * 1024 * 1024)
    assert got == reference(data, 64 * 1024 * 1024)
    assert len(got) == 2
