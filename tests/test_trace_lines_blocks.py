"""The block line splitter against the line-at-a-time reader it replaced:
same lines, numbers, trimming, oversized and torn reports, whatever the
content, the limit and the sizes the stream hands out."""

from __future__ import annotations

import io

from hypothesis import given, settings
from hypothesis import strategies as st

from omni_grpc.trace import lines as lines_module
from omni_grpc.trace.lines import RawLine, iter_lines, js_trim


def reference_lines(data: bytes, max_line_bytes: int) -> list[RawLine]:
    """The reader before blocks: one readline per line."""
    stream = io.BytesIO(data)
    out = []
    number = 0
    while True:
        chunk = stream.readline(max_line_bytes + 1)
        if not chunk:
            return out
        number += 1
        if len(chunk) > max_line_bytes and not chunk.endswith(b"\n"):
            while chunk and not chunk.endswith(b"\n"):
                chunk = stream.readline(7)
            out.append(RawLine(number, b"", oversized=True, terminated=chunk.endswith(b"\n")))
            continue
        trimmed = js_trim(chunk)
        if trimmed:
            out.append(RawLine(number, trimmed, terminated=chunk.endswith(b"\n")))


class Trickle(io.RawIOBase):
    """A stream that hands out at most the next of ``sizes`` bytes per read."""

    def __init__(self, data: bytes, sizes: list[int]) -> None:
        self.data, self.pos, self.sizes, self.turn = data, 0, sizes, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray) -> int:  # type: ignore[override]
        size = self.sizes[self.turn % len(self.sizes)] if self.sizes else len(buffer)
        self.turn += 1
        piece = self.data[self.pos : self.pos + min(size, len(buffer))]
        buffer[: len(piece)] = piece
        self.pos += len(piece)
        return len(piece)


PIECES = [
    b"a",
    b"{}",
    b" ",
    b"\t",
    b"\n",
    b"\r\n",
    b"\xc2\xa0",
    b"\xef\xbb\xbf",
    b"\xff",
    b"\xe2\x80\xa8",
]


@settings(max_examples=400, deadline=None)
@given(
    pieces=st.lists(st.sampled_from(PIECES), max_size=80),
    max_line_bytes=st.integers(min_value=1, max_value=24),
    block=st.integers(min_value=1, max_value=40),
    sizes=st.lists(st.integers(min_value=1, max_value=30), max_size=5),
)
def test_blocks_split_like_the_line_reader(
    pieces: list[bytes], max_line_bytes: int, block: int, sizes: list[int]
) -> None:
    data = b"".join(pieces)
    expected = reference_lines(data, max_line_bytes)
    saved = lines_module._BLOCK_BYTES
    lines_module._BLOCK_BYTES = block
    try:
        got = list(iter_lines(Trickle(data, sizes), max_line_bytes=max_line_bytes))
        buffered = list(iter_lines(io.BytesIO(data), max_line_bytes=max_line_bytes))
    finally:
        lines_module._BLOCK_BYTES = saved
    assert got == expected
    assert buffered == expected


def test_a_huge_line_is_not_held() -> None:
    """An oversized line is drained in blocks; the lines around it survive."""
    data = b'{"a":1}\n' + b"x" * (3 * 1024 * 1024) + b'\n{"b":2}\n'
    got = list(iter_lines(io.BytesIO(data), max_line_bytes=1024))
    assert got == [
        RawLine(1, b'{"a":1}'),
        RawLine(2, b"", oversized=True),
        RawLine(3, b'{"b":2}'),
    ]
