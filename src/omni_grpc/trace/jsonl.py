"""Streaming JSONL trace reading and writing.

Strict mode (the default) raises :class:`ConversionError` at the first malformed
line, naming it. Tolerant mode follows the reference ``parseTraceLines``: a
malformed middle line is skipped and reported; a malformed last non-empty line (a
torn tail) is ignored and reported with ``last=True``. Only one pending malformed
line is held back to tell the two apart, so memory stays constant.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, BinaryIO

from omni_grpc.convert import ConversionError, parse_message, serialize_message
from omni_grpc.trace.lines import DEFAULT_MAX_LINE_BYTES, RawLine, iter_lines
from omni_grpc.trace.records import SkipCallback, SkippedLine, TraceRecord
from omni_grpc.trace.source import Source, open_source

if TYPE_CHECKING:
    from omni_grpc_proto.omni.v1.omni_pb2 import OmniMessage


def _parse(raw: RawLine, max_line_bytes: int) -> OmniMessage:
    if raw.oversized:
        raise ConversionError(f"line is longer than {max_line_bytes} bytes", line=raw.number)
    return parse_message(raw.data, line=raw.number, max_bytes=max_line_bytes)


def read_jsonl(
    source: Source,
    *,
    tolerant: bool = False,
    on_skip: SkipCallback | None = None,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
) -> Iterator[TraceRecord]:
    """Yields ``TraceRecord(line, message)`` for each record of a JSONL trace."""
    with open_source(source) as stream:
        yield from _read_stream(stream, tolerant, on_skip, max_line_bytes)


def _read_stream(
    stream: BinaryIO,
    tolerant: bool,
    on_skip: SkipCallback | None,
    max_line_bytes: int,
) -> Iterator[TraceRecord]:
    lines = LineParser(tolerant=tolerant, on_skip=on_skip, max_line_bytes=max_line_bytes)
    for raw in iter_lines(stream, max_line_bytes=max_line_bytes):
        message = lines.parse(raw)
        if message is not None:
            yield TraceRecord(raw.number, message)
    lines.finish()


class LineParser:
    """Parses lines under the strict or tolerant rules.

    Tolerant mode holds back one malformed line until it knows whether a
    record follows it (a malformed middle line) or not (the last line), so
    memory stays constant. Readers that convert some lines by other means
    call :meth:`accepted` for them, so the rules see every record.
    """

    def __init__(
        self, *, tolerant: bool, on_skip: SkipCallback | None, max_line_bytes: int
    ) -> None:
        self.tolerant = tolerant
        self.on_skip = on_skip
        self.max_line_bytes = max_line_bytes
        self.pending: SkippedLine | None = None

    def parse(self, raw: RawLine) -> OmniMessage | None:
        """The line's message, or None when tolerant mode skips it."""
        try:
            message = _parse(raw, self.max_line_bytes)
        except ConversionError as exc:
            if not self.tolerant:
                raise
            self.accepted()
            self.pending = SkippedLine(
                raw.number, _reason(exc), last=False, terminated=raw.terminated
            )
            return None
        self.accepted()
        return message

    def accepted(self) -> None:
        """A record was read: a line held back was a middle line."""
        if self.pending is not None:
            if self.on_skip is not None:
                self.on_skip(self.pending)
            self.pending = None

    def finish(self) -> None:
        """The stream ended: a line still held back was the last."""
        pending, self.pending = self.pending, None
        if pending is not None and self.on_skip is not None:
            self.on_skip(
                SkippedLine(pending.line, pending.reason, last=True, terminated=pending.terminated)
            )


def _reason(exc: ConversionError) -> str:
    return f"{exc.path}: {exc.reason}" if exc.path else exc.reason


def write_jsonl(messages: Iterable[OmniMessage], sink: BinaryIO) -> int:
    """Writes each message as one compact reference-JSON line; returns the count."""
    count = 0
    write = sink.write
    for msg in messages:
        write(serialize_message(msg) + b"\n")
        count += 1
    return count
