"""Trace file layout: ``<dir>/<yyyy-mm-dd>/<session_id>_<NNN>.jsonl`` and session ids."""

from __future__ import annotations

import re
import secrets
from datetime import datetime
from pathlib import Path

# The reference reader recognises shard files by this name pattern.
SHARD_NAME = re.compile(r"^(.+)_(\d{3})\.jsonl$")


def new_session_id(now: datetime | None = None) -> str:
    """A fresh id in the reference form ``session-YYYY-MM-DD-HH-mm-ss-<8hex>`` (local time)."""
    stamp = (now or datetime.now()).strftime("%Y-%m-%d-%H-%M-%S")
    return f"session-{stamp}-{secrets.token_hex(4)}"


def trace_path_for(
    traces_dir: str | Path,
    session_id: str,
    index: int = 1,
    *,
    day: datetime | None = None,
) -> Path:
    """The shard path for ``session_id``; the date directory is today's local date
    unless ``day`` is given (a rotated session keeps the date it started with)."""
    if not 1 <= index <= 999:
        raise ValueError(f"shard index must be between 1 and 999, got {index}")
    if not session_id or "/" in session_id or session_id in (".", ".."):
        raise ValueError(f"not a usable session id: {session_id!r}")
    date_dir = (day or datetime.now()).strftime("%Y-%m-%d")
    return Path(traces_dir) / date_dir / f"{session_id}_{index:03d}.jsonl"


def parse_shard_name(path: str | Path) -> tuple[str, int] | None:
    """``(session_id, index)`` for a shard file name, ``None`` for any other file."""
    match = SHARD_NAME.match(Path(path).name)
    if match is None:
        return None
    return match.group(1), int(match.group(2))


# Every session id a client names: what ``new_session_id`` mints and what a
# client may choose for itself. Short and path-safe, so it can name a trace
# file, a Redis key and a log line as it is.
SESSION_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")
SESSION_ID_RULE = "must match [A-Za-z0-9_-]{1,128}"


def is_session_id(value: str) -> bool:
    return SESSION_ID.fullmatch(value) is not None
