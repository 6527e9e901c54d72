"""Trace files: the JSONL writer with the reference guarantees, streaming JSONL
and ``.binpb`` readers/writers, the file layout, and protocol validation.

The names below are imported on first use (PEP 562), not with the package:
``omni-grpc convert`` needs only the converters, and the writer's imports
(the protocol layer, logging, the file layout's hashing) cost each such
process about a fifth of its start-up.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from omni_grpc.trace.binpb import FrameError, encode_frame, read_binpb, write_binpb
    from omni_grpc.trace.jsonl import read_jsonl, write_jsonl
    from omni_grpc.trace.paths import new_session_id, parse_shard_name, trace_path_for
    from omni_grpc.trace.records import SkippedLine, TraceRecord
    from omni_grpc.trace.writer import StaleWriter, TraceWriter

# Each public name and the submodule that defines it.
_HOME = {
    "FrameError": "binpb",
    "encode_frame": "binpb",
    "read_binpb": "binpb",
    "write_binpb": "binpb",
    "read_jsonl": "jsonl",
    "write_jsonl": "jsonl",
    "new_session_id": "paths",
    "parse_shard_name": "paths",
    "trace_path_for": "paths",
    "SkippedLine": "records",
    "TraceRecord": "records",
    "StaleWriter": "writer",
    "TraceWriter": "writer",
}

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


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value  # looked up once
    return value
