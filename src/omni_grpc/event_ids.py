"""Event ids, ``<epoch>-<seq>``: written by the runtime, read back by clients.

Their home is the ground floor so that a client (``omni-grpc attach
--after``) can check one without importing the runtime that mints them.
"""

from __future__ import annotations

import re

_EVENT_ID = re.compile(r"^(.*)-(\d+)$")


def format_event_id(epoch: str, seq: int) -> str:
    return f"{epoch}-{seq}"


def parse_event_id(event_id: str) -> tuple[str, int] | None:
    """Splits ``<epoch>-<seq>`` at the last dash; None when malformed."""
    match = _EVENT_ID.match(event_id)
    if match is None:
        return None
    return match.group(1), int(match.group(2))
