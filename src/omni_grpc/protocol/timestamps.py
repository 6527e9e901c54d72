"""Reference timestamps: JavaScript ``new Date().toISOString()`` form."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

# Anything that returns a timestamp string; tests inject a deterministic one.
Clock = Callable[[], str]


def format_timestamp(moment: datetime) -> str:
    """``YYYY-MM-DDTHH:mm:ss.sssZ`` (UTC, 3-digit milliseconds, ``Z``)."""
    utc = moment.astimezone(UTC) if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"


def now_timestamp() -> str:
    return format_timestamp(datetime.now(UTC))
