"""Trace formats by name or file extension, and format-generic reading/writing."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, BinaryIO, Literal

from omni_grpc.trace.binpb import read_binpb, write_binpb
from omni_grpc.trace.jsonl import read_jsonl, write_jsonl
from omni_grpc.trace.records import SkipCallback, TraceRecord
from omni_grpc.trace.source import Source

if TYPE_CHECKING:
    from omni_grpc_proto.omni.v1.omni_pb2 import OmniMessage

TraceFormat = Literal["jsonl", "binpb"]
FORMATS: tuple[TraceFormat, ...] = ("jsonl", "binpb")
EXTENSIONS: dict[str, TraceFormat] = {".jsonl": "jsonl", ".ndjson": "jsonl", ".binpb": "binpb"}


def format_from_path(path: str | os.PathLike[str]) -> TraceFormat | None:
    """The format its extension names, ``None`` for ``-`` or an unknown extension."""
    _, ext = os.path.splitext(os.fspath(path))
    return EXTENSIONS.get(ext.lower())


def read_records(
    source: Source,
    fmt: TraceFormat,
    *,
    tolerant: bool = False,
    on_skip: SkipCallback | None = None,
) -> Iterator[TraceRecord]:
    """Records of either format. ``.binpb`` has no tolerant mode: a bad frame
    cannot be skipped because the next frame's start is unknown."""
    if fmt == "jsonl":
        return read_jsonl(source, tolerant=tolerant, on_skip=on_skip)
    return read_binpb(source)


def write_records(
    messages: Iterable[OmniMessage],
    sink: BinaryIO,
    fmt: TraceFormat,
    *,
    compress: bool = False,
    plain: bool = False,
) -> int:
    """``compress`` and ``plain`` are ``write_binpb``'s (JSONL has neither)."""
    if fmt == "jsonl":
        return write_jsonl(messages, sink)
    return write_binpb(messages, sink, compress=compress, plain=plain)
