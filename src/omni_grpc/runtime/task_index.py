"""The task index: every run of every session, findable and listable for the
session's lifetime, whatever its replay window still holds.

A run (an A2A task) is named by its session and the event id of its first
event. The replay window forgets a run's first events long before the session
ends (``--buffer-events``), so what a reader needs to find a run, list it and
say how it stands is kept here, beside the session index: its state, its
timestamps, and its place in the log and in the trace. Listing reads a sorted
index (newest first, by the time its state last changed), so a page costs the
runs it returns, not every session's window. A deleted session's runs go with
it (``remove_session``).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol


@dataclass(frozen=True)
class TaskRecord:
    session_id: str
    # The id of the run's first event: the run's name within its session.
    event_id: str
    # The writer's word for how the run stands (A2A's TaskState names).
    state: str
    started_at: str
    # When ``state`` last changed (ISO 8601 UTC): the order runs are listed in.
    updated_at: str
    # The newest event out when the state was written (the first event until
    # the run's close, then the close's last message).
    last_event_id: str
    # The run's records in the session's trace, 1-based and inclusive (None
    # until the run has written one).
    first_record: int | None = None
    last_record: int | None = None
    # The id the client gave the message that started the run, if any.
    message_id: str | None = None
    # Why the run did not complete (its failure, or its abort's reason).
    reason: str | None = None

    @property
    def key(self) -> str:
        return f"{self.session_id}:{self.event_id}"


def instant(text: str) -> float:
    """An ISO 8601 timestamp as seconds since the epoch (0 for a bad one): the
    sort key, so both backends order runs the same way."""
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return 0.0
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp()


class TaskIndex(Protocol):
    async def put(self, record: TaskRecord) -> None:
        """Adds the run, or replaces what is known of it (atomically)."""
        ...

    async def get(self, session_id: str, event_id: str) -> TaskRecord | None: ...

    async def page(
        self,
        *,
        session_id: str | None = None,
        state: str | None = None,
        updated_after: float | None = None,
        offset: int = 0,
        limit: int = 50,
    ) -> tuple[list[TaskRecord], int]:
        """Runs newest first (by ``updated_at``), of one session or all, in one
        state or any, changed after ``updated_after`` (seconds since the epoch)
        or at any time: ``limit`` of them from ``offset``, and how many match."""
        ...

    async def remove_session(self, session_id: str) -> None:
        """Forgets every run of the session (it was deleted)."""
        ...


# A scope: (session id or None for all, state or None for any).
_Scope = tuple[str | None, str | None]
# Sorted ascending, so newest first is the list read from its end.
_Entry = tuple[float, str]


class MemoryTaskIndex:
    """The embedded default: sorted lists per scope. No method awaits, so each
    is atomic; a page is two bisections and a slice."""

    def __init__(self) -> None:
        self._records: dict[str, TaskRecord] = {}
        self._sorted: dict[_Scope, list[_Entry]] = {}
        self._by_session: dict[str, set[str]] = {}

    @staticmethod
    def _scopes(record: TaskRecord) -> list[_Scope]:
        return [
            (None, None),
            (None, record.state),
            (record.session_id, None),
            (record.session_id, record.state),
        ]

    def _unlink(self, record: TaskRecord) -> None:
        entry = (instant(record.updated_at), record.key)
        for scope in self._scopes(record):
            entries = self._sorted.get(scope)
            if entries is None:
                continue
            at = bisect.bisect_left(entries, entry)
            if at < len(entries) and entries[at] == entry:
                del entries[at]
            if not entries:
                del self._sorted[scope]

    async def put(self, record: TaskRecord) -> None:
        old = self._records.get(record.key)
        if old is not None:
            self._unlink(old)
        self._records[record.key] = record
        self._by_session.setdefault(record.session_id, set()).add(record.key)
        entry = (instant(record.updated_at), record.key)
        for scope in self._scopes(record):
            bisect.insort(self._sorted.setdefault(scope, []), entry)

    async def get(self, session_id: str, event_id: str) -> TaskRecord | None:
        return self._records.get(f"{session_id}:{event_id}")

    async def page(
        self,
        *,
        session_id: str | None = None,
        state: str | None = None,
        updated_after: float | None = None,
        offset: int = 0,
        limit: int = 50,
    ) -> tuple[list[TaskRecord], int]:
        entries = self._sorted.get((session_id, state), [])
        # Entries at or before ``updated_after`` are the list's head.
        low = (
            0
            if updated_after is None
            else bisect.bisect_right(entries, (updated_after, "\U0010ffff"))
        )
        total = len(entries) - low
        end = len(entries) - offset
        start = max(low, end - limit)
        picked = entries[start:end] if end > low else []
        return [self._records[key] for _, key in reversed(picked)], total

    async def remove_session(self, session_id: str) -> None:
        for key in self._by_session.pop(session_id, set()):
            record = self._records.pop(key)
            self._unlink(record)
