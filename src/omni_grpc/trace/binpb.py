"""``.binpb`` traces: a stream of varint-length-prefixed ``OmniMessage`` records,
the framing of Java's ``writeDelimitedTo``/``parseDelimitedFrom`` and Go's
``protodelim``. Read and written one record at a time (constant memory)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import BinaryIO

from google.protobuf.message import DecodeError

from omni_grpc.convert import ConversionError
from omni_grpc.trace.records import TraceRecord
from omni_grpc.trace.source import Source, open_source
from omni_grpc_proto.omni.v1.omni_pb2 import OmniMessage

DEFAULT_MAX_FRAME_BYTES = 64 * 1024 * 1024
_MAX_VARINT_BYTES = 10

ReadFn = Callable[[int], bytes]


class FrameError(ConversionError):
    """A ``.binpb`` stream that cannot be read: ``record`` is the 1-based index of
    the bad record and ``offset`` the byte offset where its frame starts."""

    def __init__(self, record: int, offset: int, reason: str) -> None:
        super().__init__(f"record {record} at byte offset {offset}: {reason}")
        self.record = record
        self.offset = offset


def encode_varint(value: int) -> bytes:
    if value < 0:
        raise ValueError("a length prefix cannot be negative")
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode_frame(msg: OmniMessage) -> bytes:
    body = msg.SerializeToString(deterministic=True)
    return encode_varint(len(body)) + body


def write_binpb(messages: Iterable[OmniMessage], sink: BinaryIO) -> int:
    """Writes each message as one delimited record; returns the count."""
    count = 0
    write = sink.write
    for msg in messages:
        write(encode_frame(msg))
        count += 1
    return count


def read_binpb(
    source: Source, *, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
) -> Iterator[TraceRecord]:
    """Yields ``TraceRecord(index, message)``; raises :class:`FrameError` for a
    truncated, oversized or undecodable record."""
    with open_source(source) as stream:
        yield from _read_frames(stream, max_frame_bytes)


def _read_frames(stream: BinaryIO, max_frame_bytes: int) -> Iterator[TraceRecord]:
    offset = 0
    record = 0
    read = stream.read
    while True:
        record += 1
        length, prefix_size = _read_length(read, record, offset)
        if length is None:
            return
        if length > max_frame_bytes:
            raise FrameError(
                record, offset, f"frame of {length} bytes exceeds the {max_frame_bytes} limit"
            )
        body = read(length) if length else b""
        if len(body) < length:
            raise FrameError(
                record,
                offset,
                f"truncated frame: {length} bytes announced, {len(body)} present",
            )
        try:
            msg = OmniMessage.FromString(body)
        except DecodeError as exc:
            raise FrameError(record, offset, f"not a valid OmniMessage ({exc})") from exc
        yield TraceRecord(record, msg)
        offset += prefix_size + length


def _read_length(read: ReadFn, record: int, offset: int) -> tuple[int | None, int]:
    """The varint at the current position; ``(None, 0)`` at a clean end of stream."""
    value = 0
    for i in range(_MAX_VARINT_BYTES):
        byte = read(1)
        if not byte:
            if i == 0:
                return None, 0
            raise FrameError(record, offset, "truncated length prefix")
        value |= (byte[0] & 0x7F) << (7 * i)
        if byte[0] < 0x80:
            return value, i + 1
    raise FrameError(record, offset, "malformed length prefix (longer than 10 bytes)")
