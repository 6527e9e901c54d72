"""``.binpb`` traces: a stream of varint-length-prefixed ``OmniMessage`` records,
the framing of Java's ``writeDelimitedTo``/``parseDelimitedFrom`` and Go's
``protodelim``. Read and written one record at a time (constant memory).

Asked to (``compress=True``, ``convert --compress``), the writer stores a
record of at least ``COMPRESS_FROM`` bytes compressed when that makes it
smaller: an ``OmniMessage`` whose only field is ``zlib_record``, the
zlib stream of the record's own bytes. Base64 blobs (OpenAI reasoning's
``encrypted_content``, images) and JSON Schema text are stored as the
strings other languages read, so the wire format alone saves only the JSON
keys around them; zlib, in every language's standard library, does the
rest. Readers inflate such a record and parse the result as the record.
Uncompressed is the default: a reader built from the generated stubs alone
sees a compressed record as a message with no payload, and must not have to
know. What every record does by default is store the long canonical base64
strings of ``fidelity`` as the bytes they stand for (``base64_values``, see
``omni_grpc.convert._base64``), a typed field any reader decodes with its
standard base64 encoder; ``plain=True`` (``convert --plain``) writes them as
text, the form readers built from older stubs read whole.
"""

from __future__ import annotations

import sys
import zlib
from collections.abc import Callable, Iterable, Iterator
from typing import BinaryIO

from google.protobuf.message import DecodeError

from omni_grpc.convert import ConversionError
from omni_grpc.convert._base64 import PACK_FROM
from omni_grpc.convert._base64 import pack as pack_base64
from omni_grpc.convert._base64 import unpack as unpack_base64
from omni_grpc.convert._native import NATIVE
from omni_grpc.trace.records import TraceRecord
from omni_grpc.trace.source import Source, open_source
from omni_grpc_proto.omni.v1.omni_pb2 import OmniMessage

DEFAULT_MAX_FRAME_BYTES = 64 * 1024 * 1024
_MAX_VARINT_BYTES = 10
_CHUNK_BYTES = 1024 * 1024
# Below this a record's zlib stream rarely pays for its header and checksum.
COMPRESS_FROM = 256
# zlib's default: level 9 saves under 1% more on traces, at twice the time.
_ZLIB_LEVEL = 6
# The default form's marked records (tool lists, large arguments) trade size
# for speed: level 1 is 4x faster than 6 on JSON Schemas and tool arguments
# and stores about 1.35x the bytes (still a quarter of the text or less);
# --compress, asked for size, keeps level 6.
_MARKED_LEVEL = 1
# Below this a marked record saves a hundred bytes or so (a small tool list
# of 400 bytes stores 235), costs a zlib call on each side, and is one more
# record a reader built from the stubs alone cannot read: kept plain.
MARK_FROM = 1024
# The first byte of a record stored compressed in the marked form, the zlib
# stream follows. It is a protobuf tag of field number 0, which every
# protobuf parser refuses: a reader that does not inflate such a record fails
# on it, loudly, instead of reading a message with nothing in it.
MARK = b"\x00"
# A tool call's arguments from this size on are stored compressed by default:
# coding agents' edits and file writes run to tens of kilobytes of JSON text,
# which protobuf alone stores as it is.
LARGE_ARGUMENTS = 4096

ReadFn = Callable[[int], bytes]


class FrameError(ConversionError):
    """A ``.binpb`` stream that cannot be read: ``record`` is the 1-based index of
    the bad record and ``offset`` the byte offset where its frame starts."""

    def __init__(self, record: int, offset: int, reason: str) -> None:
        super().__init__(f"record {record} at byte offset {offset}: {reason}")
        self.record = record
        self.offset = offset


def unwritable(record: int, exc: ConversionError) -> ConversionError:
    """A record that cannot be written as JSON (its fields contradict each
    other), named like a bad frame is."""
    return ConversionError(f"record {record}: {exc}")


def encode_varint(value: int) -> bytes:
    if value < 0:
        raise ValueError("a length prefix cannot be negative")
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def stored_record(body: bytes) -> bytes:
    """A record's bytes as a ``.binpb`` stores them: ``body`` itself, or a
    ``zlib_record`` holding its zlib stream when that is smaller."""
    if len(body) < COMPRESS_FROM:
        return body
    wrapped = OmniMessage(zlib_record=zlib.compress(body, _ZLIB_LEVEL)).SerializeToString()
    return wrapped if len(wrapped) < len(body) else body


def marked_record(body: bytes) -> bytes:
    """A record's bytes stored compressed in the marked form (``MARK`` and
    the zlib stream of ``body``) when it is ``MARK_FROM`` bytes or more and
    that is smaller, else ``body``."""
    if len(body) < MARK_FROM:
        return body
    packed = MARK + zlib.compress(body, _MARKED_LEVEL)
    return packed if len(packed) < len(body) else body


def carries_json_text(msg: OmniMessage) -> bool:
    """Whether the record holds large JSON text, stored compressed by
    default: tool definitions (their JSON Schemas), or a tool call's
    arguments of ``LARGE_ARGUMENTS`` bytes or more."""
    arm = msg.WhichOneof("payload")
    if arm == "tool_call":
        return len(msg.tool_call.arguments) >= LARGE_ARGUMENTS
    return arm == "tool_list_ready" or (arm == "session_meta" and len(msg.session_meta.tools) > 0)


def encode_frame(msg: OmniMessage, *, compress: bool = False, plain: bool = False) -> bytes:
    """One delimited record. Unless ``plain`` (the form readers built from
    older stubs read whole): long base64 strings are stored as bytes
    (``base64_values``), and a record of large JSON text is stored
    compressed in the marked form. ``compress`` stores every large record
    as ``zlib_record`` instead."""
    if not plain:
        msg = pack_base64(msg)
    body = msg.SerializeToString(deterministic=True)
    if compress:
        body = stored_record(body)
    elif not plain and carries_json_text(msg):
        body = marked_record(body)
    return encode_varint(len(body)) + body


def _rewrite_large_frames(
    block: bytes, rewrite: Callable[[bytes, int], bytes], pick: Pick | int = COMPRESS_FROM
) -> bytes:
    """Finished frames (the native batch converter's) with each record
    ``pick`` takes passed through ``rewrite(body, arm)``, which hands back
    the body itself when it keeps it; ``block`` itself when none changes.
    ``pick`` is a least body size for every record, or a :class:`Pick`."""
    parts: list[bytes] = []
    done = 0
    for start, end, arm in _spans(block, pick):
        body = block[start:end]
        stored = rewrite(body, arm)
        if stored is not body:
            # the frames are the C writer's, whose length prefixes are minimal
            head = start - len(encode_varint(end - start))
            parts += (block[done:head], encode_varint(len(stored)), stored)
            done = end
    if not parts:
        return block
    parts.append(block[done:])
    return b"".join(parts)


class Pick:
    """Which records of a payload arm to look at: those of ``least`` bytes
    or more (by arm), holding payload field ``holding[arm]`` where one is
    named. The C code finds them without a Python step per frame."""

    def __init__(self, least: dict[int, int], holding: dict[int, int]) -> None:
        self.least = least
        self.holding = holding
        size = max(least) + 1
        self.least_bytes = b"".join(least.get(n, 0).to_bytes(4, "little") for n in range(size))
        self.holding_bytes = bytes(holding.get(n, 0) for n in range(size))

    def takes(self, body: bytes) -> int | None:
        """The record's arm when taken (the Python walk's test), else None."""
        arm = _payload_field(body)
        if len(body) < self.least.get(arm, 0) or arm not in self.least:
            return None
        field = self.holding.get(arm)
        if field is not None:
            record = OmniMessage.FromString(body)
            payload = getattr(record, record.WhichOneof("payload") or "unknown")
            if not any(f.number == field for f, _ in payload.ListFields()):
                return None
        return arm


def _spans(block: bytes, pick: Pick | int) -> list[tuple[int, int, int]]:
    """``(start, end, arm)`` of each body ``pick`` takes."""
    if isinstance(pick, Pick) and NATIVE is not None and sys.byteorder == "little":
        return NATIVE.frames_of_arms(block, pick.least_bytes, pick.holding_bytes)
    spans = []
    pos = 0
    while pos < len(block):
        length, start = _parse_length(block, pos, 0, pos)
        pos = start + length
        body = block[start:pos]
        if isinstance(pick, Pick):
            arm = pick.takes(body)
            if arm is not None:
                spans.append((start, pos, arm))
        elif length >= pick:
            spans.append((start, pos, _payload_field(body)))
    return spans


def _payload_field(body: bytes) -> int:
    """The field number of a record's payload arm (0 if none), read from its
    first tags: a deterministic record holds timestamp (1) and origin (3)
    before it."""
    pos = 0
    while pos < len(body):
        tag, pos = _varint(body, pos)
        number = tag >> 3
        if number not in (1, 3) or tag & 7 != 2:
            return number
        length, pos = _varint(body, pos)
        pos += length
    return 0


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while pos < len(buf):
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80 or shift > 63:
            break
    return value, pos


def _arm(name: str) -> int:
    number: int = OmniMessage.DESCRIPTOR.fields_by_name[name].number
    return number


def _field(arm: str, name: str) -> int:
    payload = OmniMessage.DESCRIPTOR.fields_by_name[arm].message_type
    assert payload is not None
    number: int = payload.fields_by_name[name].number
    return number


# The records the native converter wrote that the default form may rewrite:
# base64 in typed fields (a string of PACK_FROM characters or more), large
# JSON text. A tool output only with images, a session_meta only with tools
# (the legacy place of a tool list); a tool call only from LARGE_ARGUMENTS
# bytes on, since one the C writer wrote has no fidelity.
_DEFAULT_FORM = Pick(
    {
        _arm("image_url"): PACK_FROM,
        _arm("inline_data"): PACK_FROM,
        _arm("inline_thinking"): PACK_FROM,
        _arm("tool_call_output"): PACK_FROM,
        _arm("tool_call"): LARGE_ARGUMENTS,
        _arm("tool_list_ready"): MARK_FROM,
        _arm("session_meta"): MARK_FROM,
    },
    {
        _arm("tool_call_output"): _field("tool_call_output", "images"),
        _arm("session_meta"): _field("session_meta", "tools"),
    },
)


def _default_form(body: bytes, compress: bool) -> bytes:
    msg = OmniMessage.FromString(body)
    packed = pack_base64(msg)
    if packed is not msg:
        body = packed.SerializeToString(deterministic=True)
    if compress:
        return stored_record(body)
    if carries_json_text(packed):
        return marked_record(body)
    return body


def default_form_frames(block: bytes, *, compress: bool = False) -> bytes:
    """Finished frames (the native converter's, which stores everything as
    text) as :func:`encode_frame` writes them when not ``plain``: long
    base64 stored as bytes, then records of large JSON text compressed in
    the marked form, or every large record as ``zlib_record`` with
    ``compress``; ``block`` itself when none changes."""
    if compress:  # every large record is compressed: no record passes unseen

        def compressed(body: bytes, arm: int) -> bytes:
            if _DEFAULT_FORM.takes(body) is None:
                return stored_record(body)
            return _default_form(body, True)

        return _rewrite_large_frames(block, compressed, PACK_FROM)
    return _rewrite_large_frames(block, lambda body, _: _default_form(body, False), _DEFAULT_FORM)


def compress_frames(block: bytes) -> bytes:
    """Finished frames with each large record stored as :func:`stored_record`
    stores it; ``block`` itself when none changes."""
    return _rewrite_large_frames(block, lambda body, _: stored_record(body))


def write_binpb(
    messages: Iterable[OmniMessage],
    sink: BinaryIO,
    *,
    compress: bool = False,
    plain: bool = False,
) -> int:
    """Writes each message as one delimited record; returns the count.
    ``compress=True`` stores large records as ``zlib_record``, for readers
    that inflate it; ``plain=True`` keeps base64 as text (see
    :func:`encode_frame`)."""
    count = 0
    write = sink.write
    for msg in messages:
        write(encode_frame(msg, compress=compress, plain=plain))
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
    frames = FrameReader(stream, max_frame_bytes)
    while (body := frames.next()) is not None:
        yield TraceRecord(frames.record, decode_frame(body, frames))


def decode_frame(body: bytes, frames: FrameReader) -> OmniMessage:
    """The record a frame holds, inflated when it is stored compressed."""
    if body[:1] == MARK:
        inner = _inflate(body[1:], frames, "the marked record")
        if inner[:1] == MARK:
            raise FrameError(frames.record, frames.offset, "a compressed record inside another one")
        try:
            msg = OmniMessage.FromString(inner)
        except DecodeError as exc:
            raise FrameError(
                frames.record,
                frames.offset,
                f"the inflated record is not a valid OmniMessage ({exc})",
            ) from exc
        if msg.zlib_record:
            raise FrameError(frames.record, frames.offset, "a compressed record inside another one")
        return _unpacked(msg, frames)
    try:
        msg = OmniMessage.FromString(body)
    except DecodeError as exc:
        raise FrameError(frames.record, frames.offset, f"not a valid OmniMessage ({exc})") from exc
    if not msg.zlib_record:
        return _unpacked(msg, frames)
    if len(msg.ListFields()) != 1:
        raise FrameError(
            frames.record, frames.offset, "a compressed record (zlib_record) holds other fields too"
        )
    inner = _inflate(msg.zlib_record, frames, "zlib_record")
    try:
        msg = OmniMessage.FromString(inner)
    except DecodeError as exc:
        raise FrameError(
            frames.record, frames.offset, f"the inflated record is not a valid OmniMessage ({exc})"
        ) from exc
    if msg.zlib_record:
        raise FrameError(frames.record, frames.offset, "a compressed record inside another one")
    return _unpacked(msg, frames)


def _unpacked(msg: OmniMessage, frames: FrameReader) -> OmniMessage:
    """The record with its stored values put back; an error names it."""
    try:
        return unpack_base64(msg)
    except ConversionError as exc:
        raise unwritable(frames.record, exc) from None


def _inflate(packed: bytes, frames: FrameReader, what: str) -> bytes:
    """One whole zlib stream, inflated to at most the frame limit (so a small
    frame cannot inflate to gigabytes)."""
    limit = frames.max_frame_bytes
    inflater = zlib.decompressobj()
    try:
        inner = inflater.decompress(packed, limit + 1)
    except zlib.error as exc:
        raise FrameError(
            frames.record, frames.offset, f"{what} is not valid zlib data ({exc})"
        ) from None
    if len(inner) > limit:
        raise FrameError(
            frames.record,
            frames.offset,
            f"{what} inflates past the {limit}-byte frame limit",
        )
    if not inflater.eof or inflater.unused_data:
        raise FrameError(frames.record, frames.offset, f"{what} is not one complete zlib stream")
    return inner


class FrameReader:
    """Frames of a stream, read in chunks with the length prefixes parsed from
    the buffer (one read(1) per varint byte cost more than decoding the record
    itself). ``record`` and ``offset`` name the frame last returned; a batch
    converter may take frames straight from ``buf`` and :meth:`skip` them."""

    def __init__(self, stream: BinaryIO, max_frame_bytes: int) -> None:
        self.read: ReadFn = stream.read
        self.max_frame_bytes = max_frame_bytes
        self.buf = b""
        self.pos = 0  # start of the next frame in buf
        self.record = 0
        self.offset = 0  # where the frame last returned starts
        self._next_offset = 0

    def fill(self, wanted: int) -> bool:
        """At least ``wanted`` bytes from ``pos`` when the stream has them;
        False at the end of the stream."""
        if len(self.buf) - self.pos < wanted:
            self.buf = _fill(self.read, self.buf[self.pos :], wanted)
            self.pos = 0
        return self.pos < len(self.buf)

    def cut_off(self) -> bool:
        """Whether the next frame ends past the buffer (so reading on may
        complete it); False for a whole frame, or a length prefix that is
        itself an error, which :meth:`next` names."""
        try:
            length, start = _parse_length(self.buf, self.pos, self.record + 1, self._next_offset)
        except FrameError:
            return len(self.buf) - self.pos < _MAX_VARINT_BYTES
        return start + length > len(self.buf) and length <= self.max_frame_bytes

    def skip(self, end: int, records: int) -> None:
        """``records`` frames up to ``end`` in ``buf`` were taken."""
        self._next_offset += end - self.pos
        self.record += records
        self.pos = end

    def next(self) -> bytes | None:
        """The next frame's body, None at the end; :class:`FrameError` for a
        truncated or oversized frame."""
        if not self.fill(_MAX_VARINT_BYTES):
            return None
        self.record += 1
        self.offset = offset = self._next_offset
        record, buf, pos = self.record, self.buf, self.pos
        length, start = _parse_length(buf, pos, record, offset)
        if length > self.max_frame_bytes:
            raise FrameError(
                record, offset, f"frame of {length} bytes exceeds the {self.max_frame_bytes} limit"
            )
        end = start + length
        if end <= len(buf):
            body = buf[start:end]
            self.pos = end
        else:
            rest = _fill(self.read, buf[start:], length)
            if len(rest) < length:
                raise FrameError(
                    record,
                    offset,
                    f"truncated frame: {length} bytes announced, {len(rest)} present",
                )
            body, self.buf, self.pos = rest[:length], rest, length
        self._next_offset = offset + (start - pos) + length
        return body


def _fill(read: ReadFn, head: bytes, wanted: int) -> bytes:
    """``head`` plus what the stream holds, until at least ``wanted`` bytes or
    the end of the stream (a raw stream may return short reads)."""
    parts = [head]
    have = len(head)
    while have < wanted:
        chunk = read(max(wanted - have, _CHUNK_BYTES))
        if not chunk:
            break
        parts.append(chunk)
        have += len(chunk)
    return b"".join(parts) if len(parts) > 1 else head


def _parse_length(buf: bytes, pos: int, record: int, offset: int) -> tuple[int, int]:
    """The varint at ``buf[pos]`` and the index just after it."""
    value = 0
    shift = 0
    i = pos
    while True:
        if i - pos == _MAX_VARINT_BYTES:
            raise FrameError(record, offset, "malformed length prefix (longer than 10 bytes)")
        if i == len(buf):
            raise FrameError(record, offset, "truncated length prefix")
        byte = buf[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, i
