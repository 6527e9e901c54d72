"""Converting a whole trace from one format to the other.

Per record this is ``parse_message`` then ``SerializeToString`` (JSONL to
``.binpb``), or ``FromString`` then ``serialize_message``; the results, the
errors and the tolerant reader's reports are those of :mod:`.jsonl` and
:mod:`.binpb`. With the native codec, runs of ordinary records go from text
to frames (and back) in C without a message object, and each record it
declines is converted here, one at a time, by the Python codec, which then
names any error.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import BinaryIO

from omni_grpc.convert import ConversionError, serialize_message
from omni_grpc.convert._base64 import PACK_FROM
from omni_grpc.convert._native import NATIVE
from omni_grpc.trace.binpb import (
    _CHUNK_BYTES,
    DEFAULT_MAX_FRAME_BYTES,
    FrameReader,
    compress_frames,
    decode_frame,
    default_form_frames,
    encode_frame,
    unwritable,
)
from omni_grpc.trace.jsonl import LineParser
from omni_grpc.trace.lines import (
    DEFAULT_MAX_LINE_BYTES,
    RawLine,
    block_lines,
    iter_blocks,
    raw_line,
)
from omni_grpc.trace.records import SkipCallback
from omni_grpc.trace.source import Source, open_source

Progress = Callable[[], None]
# The batch reader reads on when fewer bytes than this are left in its buffer.
_REFILL_BELOW = 64 * 1024


def jsonl_to_binpb(
    source: Source,
    sink: BinaryIO,
    *,
    tolerant: bool = False,
    on_skip: SkipCallback | None = None,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    progress: Progress | None = None,
    compress: bool = False,
    plain: bool = False,
) -> int:
    """Writes the JSONL trace's records as ``.binpb`` frames; returns the count.
    Large records are stored compressed when ``compress`` is True, base64
    kept as text when ``plain`` is (see :mod:`.binpb`). The native converter
    declines every record with a fidelity string of ``PACK_FROM`` bytes or
    more in the default form, so the Python codec writes each record a
    base64 string of fidelity could be stored in."""
    lines = LineParser(tolerant=tolerant, on_skip=on_skip, max_line_bytes=max_line_bytes)
    write = sink.write
    count = 0

    def python(raw: RawLine) -> None:
        nonlocal count
        message = lines.parse(raw)
        if message is not None:
            write(encode_frame(message, compress=compress, plain=plain))
            count += 1

    # The default form stores fidelity's long base64 strings as bytes, which
    # the Python codec does: the C code leaves it each record with a
    # fidelity string that long (and writes the rest, which stay as they are).
    fidelity_long = 0 if plain else PACK_FROM
    with open_source(source) as stream:
        for block in iter_blocks(stream, max_line_bytes=max_line_bytes):
            if isinstance(block, RawLine):
                python(block)
            elif NATIVE is None:
                for raw in block_lines(block, max_line_bytes):
                    python(raw)
            else:
                data, number, pos = block.data, block.first, 0
                while pos < len(data):
                    frames, stop, records = NATIVE.jsonl_to_binpb(
                        data, pos, max_line_bytes, fidelity_long
                    )
                    if records:
                        lines.accepted()
                        if not plain:
                            frames = default_form_frames(frames, compress=compress)
                        elif compress:
                            frames = compress_frames(frames)
                        write(frames)
                        count += records
                    if stop > pos:
                        number += data.count(b"\n", pos, stop)
                        pos = stop
                        continue
                    # declined: this one line goes through the Python codec
                    end = data.find(b"\n", pos)
                    piece = data[pos:] if end < 0 else data[pos:end]
                    declined = raw_line(number, piece, end >= 0, max_line_bytes)
                    if declined is not None:
                        python(declined)
                    pos = len(data) if end < 0 else end + 1
                    number += 1
            if progress is not None:
                progress()
    lines.finish()
    return count


def binpb_to_jsonl(
    source: Source,
    sink: BinaryIO,
    *,
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
    progress: Progress | None = None,
) -> int:
    """Writes the ``.binpb`` trace's records as JSONL lines; returns the count.
    A record that cannot be written as JSON is named by its index."""
    write = sink.write
    count = 0
    with open_source(source) as stream:
        frames = FrameReader(stream, max_frame_bytes)
        while True:
            if NATIVE is not None:
                # Refilling copies what is left of the buffer: only when
                # little is, not after every record the C code declines.
                if not frames.fill(_REFILL_BELOW):
                    break
                text, stop, records = NATIVE.binpb_to_jsonl(frames.buf, frames.pos, max_frame_bytes)
                if not records and frames.cut_off() and frames.fill(_CHUNK_BYTES):
                    text, stop, records = NATIVE.binpb_to_jsonl(
                        frames.buf, frames.pos, max_frame_bytes
                    )
                if records:
                    write(text)
                    frames.skip(stop, records)
                    count += records
                    if progress is not None:
                        progress()
                    continue
            body = frames.next()  # declined (or no native codec): the Python codec
            if body is None:
                break
            message = decode_frame(body, frames)
            try:
                write(serialize_message(message) + b"\n")
            except ConversionError as exc:
                raise unwritable(frames.record, exc) from None
            count += 1
            if progress is not None and count % 4096 == 0:
                progress()
    return count
