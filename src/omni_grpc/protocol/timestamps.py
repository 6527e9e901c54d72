"""Reference timestamps: JavaScript ``new Date().toISOString()`` form."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime

# Anything that returns a timestamp string; tests inject a deterministic one.
Clock = Callable[[], str]


def format_timestamp(moment: datetime) -> str:
    """``YYYY-MM-DDTHH:mm:ss.sssZ`` (UTC, 3-digit milliseconds, ``Z``)."""
    utc = moment.astimezone(UTC) if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"


# The second ``now_timestamp`` last formatted, and its text up to the
# milliseconds: an engine stamps every delta it streams, thousands a second,
# and strftime was a tenth of the demo engine's work per event.
_second: list[tuple[int, str]] = [(-1, "")]


def now_timestamp() -> str:
    now = time.time_ns()
    second, nanos = divmod(now, 1_000_000_000)
    cached, prefix = _second[0]
    if cached != second:
        prefix = time.strftime("%Y-%m-%dT%H:%M:%S.", time.gmtime(second))
        _second[0] = (second, prefix)
    return f"{prefix}{nanos // 1_000_000:03d}Z"
