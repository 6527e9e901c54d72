"""Where sessions live on disk: ``<data-dir>/traces`` (the reference layout) and
``<data-dir>/workspaces/<session_id>``. Restores sessions after a restart."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import orjson

from omni_grpc.trace.paths import parse_shard_name, trace_path_for
from omni_grpc.trace.resume import read_trace, recover_shard

log = logging.getLogger(__name__)


@dataclass
class StoredSession:
    session_id: str
    # Shards in index order; the last one is appended to.
    shards: list[Path]
    created_at: str
    updated_at: str
    record_count: int
    # The payload of the session_meta the first shard opens with, if it does.
    meta: dict[str, object] | None = None
    # The crash repair could not be written (a read-only or full disk): the
    # hub repairs the shard before the session's next run instead.
    needs_repair: bool = False


def utc_now() -> str:
    return iso_utc(datetime.now(UTC))


def iso_utc(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class SessionStore:
    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.traces_dir = data_dir / "traces"
        self.workspaces_dir = data_dir / "workspaces"

    def new_trace_path(self, session_id: str) -> Path:
        return trace_path_for(self.traces_dir, session_id)

    def workspace(self, session_id: str) -> Path:
        path = self.workspaces_dir / session_id
        path.mkdir(parents=True, exist_ok=True)
        return path

    def scan(self) -> list[StoredSession]:
        """Every session with a trace under ``traces/``, oldest first."""
        shards: dict[str, list[tuple[int, Path]]] = {}
        if self.traces_dir.is_dir():
            for path in self.traces_dir.glob("*/*.jsonl"):
                parsed = parse_shard_name(path)
                if parsed is not None:
                    shards.setdefault(parsed[0], []).append((parsed[1], path))
        found = [_describe(sid, [p for _, p in sorted(paths)]) for sid, paths in shards.items()]
        return sorted(found, key=lambda s: (s.created_at, s.session_id))


def _describe(session_id: str, shards: list[Path]) -> StoredSession:
    first = shards[0]
    stat = first.stat()
    record = _first_record(first)
    stamp = record.get("timestamp")
    created = (
        stamp if isinstance(stamp, str) else iso_utc(datetime.fromtimestamp(stat.st_mtime, UTC))
    )
    updated = iso_utc(datetime.fromtimestamp(max(p.stat().st_mtime for p in shards), UTC))
    # Only the newest shard is appended to, so only it can hold a crash's tail.
    last, repaired = _recover(shards[-1])
    count = sum(len(read_trace(p)[0]) for p in shards[:-1]) + last
    payload = record.get("payload")
    meta = payload if record.get("type") == "session_meta" and isinstance(payload, dict) else None
    return StoredSession(session_id, shards, created, updated, count, meta, not repaired)


def _recover(shard: Path) -> tuple[int, bool]:
    """Closes what a crash left open in ``shard``: its record count, and
    whether the repair (if one was needed) was written."""
    try:
        recovery = recover_shard(shard)
    except OSError as exc:  # a read-only or full disk: serve what is there
        log.warning("cannot repair %s after a restart: %s", shard, exc)
        return len(read_trace(shard)[0]), False
    if recovery.torn_bytes:
        log.warning(
            "%s: moved a torn last line (%d bytes) to %s.torn",
            shard,
            recovery.torn_bytes,
            shard.name,
        )
    if recovery.closed:
        log.warning("%s: closed a run interrupted by the last shutdown", shard)
    return recovery.record_count, True


def _first_record(path: Path) -> dict[str, object]:
    with path.open("rb") as fh:
        line = fh.readline()
    try:
        record = orjson.loads(line)
    except orjson.JSONDecodeError:
        return {}
    return record if isinstance(record, dict) else {}
