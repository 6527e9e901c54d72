"""Which upstream session a local session is paired with, kept beside its trace.

A relaying engine (``grpc://``, ``sse+http://``) pairs each local session with
one upstream session. The pairing is the session's shared state: a file next
to the session's trace on the shared volume, read at every run, so the next
run goes on with the same upstream conversation on any replica and after a
restart. An engine with no trace file (driven on its own) keeps it in memory.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import orjson

from omni_grpc.engines.base import RunOptions


class Pairings:
    """One engine's pairings; ``kind`` names the file (``<session>.<kind>.json``)."""

    def __init__(self, kind: str, target: str) -> None:
        self.kind = kind
        self.target = target
        self._memory: dict[str, str] = {}  # for runs without a trace file

    def _file(self, options: RunOptions) -> Path | None:
        location = options.trace.location if options.trace is not None else None
        if location is None:
            return None
        return location.parent / f"{options.session_id}.{self.kind}.json"

    def get(self, options: RunOptions) -> str | None:
        path = self._file(options)
        if path is None:
            return self._memory.get(options.session_id)
        with contextlib.suppress(OSError, orjson.JSONDecodeError, KeyError, TypeError):
            return str(orjson.loads(path.read_bytes())["upstream_session_id"])
        return None

    def set(self, options: RunOptions, upstream_id: str | None) -> None:
        path = self._file(options)
        if path is None:
            if upstream_id is None:
                self._memory.pop(options.session_id, None)
            else:
                self._memory[options.session_id] = upstream_id
            return
        if upstream_id is None:
            path.unlink(missing_ok=True)
            return
        record = {"target": self.target, "upstream_session_id": upstream_id}
        with contextlib.suppress(OSError):
            path.parent.mkdir(parents=True, exist_ok=True)
            # Written whole then renamed: a reader on another replica sees the old or the new.
            partial = path.with_suffix(".tmp")
            partial.write_bytes(orjson.dumps(record) + b"\n")
            partial.replace(path)
