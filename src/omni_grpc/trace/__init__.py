"""Trace files: the JSONL writer with the reference guarantees, streaming JSONL
and ``.binpb`` readers/writers, the file layout, and protocol validation."""

from omni_grpc.trace.binpb import FrameError, encode_frame, read_binpb, write_binpb
from omni_grpc.trace.jsonl import read_jsonl, write_jsonl
from omni_grpc.trace.paths import new_session_id, parse_shard_name, trace_path_for
from omni_grpc.trace.records import SkippedLine, TraceRecord
from omni_grpc.trace.writer import StaleWriter, TraceWriter

__all__ = [
    "FrameError",
    "SkippedLine",
    "StaleWriter",
    "TraceRecord",
    "TraceWriter",
    "encode_frame",
    "new_session_id",
    "parse_shard_name",
    "read_binpb",
    "read_jsonl",
    "trace_path_for",
    "write_binpb",
    "write_jsonl",
]
