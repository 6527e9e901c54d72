"""The session index: which sessions exist, and what ListSessions says of them.

Every replica reads and writes the same index, so a session created on one is
found on all. The index describes a session and owns its lifecycle
(``SessionLifecycle``: created, live, deleting, deleted), the one place every
entry point asks; whether it runs is the run lease's business (``run_lease``),
whose claim checks the lifecycle in the same atomic step (``RunLease.claim``),
and its messages are in its trace.

Nothing revives a session: every write but ``add`` changes a record that
exists and leaves an absent one absent, so a late write for a deleted
session (a run's record count) never leaves a record written half.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Protocol

from omni_grpc.runtime.errors import LimitExceeded
from omni_grpc.vocabulary import ApprovalMode, SessionLifecycle


@dataclass(frozen=True)
class SessionRecord:
    session_id: str
    created_at: str
    updated_at: str
    # Records in the trace (session_meta included); 0 until the first run.
    message_count: int
    # Trace shards in index order, relative to the data dir (replicas may mount
    # the shared volume at different paths).
    shards: tuple[str, ...]
    # The session_meta payload the trace opens with (or will, at the first run).
    meta: dict[str, Any] | None = None
    # Set while the trace still holds a run open (its trace could not be
    # written, or a crash's repair could not be at startup): the reason to
    # close it with before anything else is recorded, by whichever replica
    # runs the session next.
    unclosed: str | None = None
    # The session's own approval mode (the reference keeps it on the session);
    # None follows the server's --approval-mode.
    approval_mode: str | None = None
    # Where the session is in its life; a session found on disk is live.
    lifecycle: SessionLifecycle = SessionLifecycle.LIVE


def session_mode(record: SessionRecord) -> ApprovalMode | None:
    """The session's own approval mode, None when it follows the server's."""
    if record.approval_mode is None:
        return None
    try:
        return ApprovalMode(record.approval_mode)
    except ValueError:  # written by a newer replica: the server's mode applies
        return None


class SessionIndex(Protocol):
    async def add(self, record: SessionRecord, *, limit: int | None = None) -> bool:
        """Adds ``record`` unless the session is already known (then False).

        With ``limit``, raises ``LimitExceeded`` instead of adding when the
        index already holds that many sessions (checked and added atomically)."""
        ...

    async def get(self, session_id: str) -> SessionRecord | None:
        """The session's record, whatever its lifecycle; None once deleted."""
        ...

    async def list(self) -> list[SessionRecord]:
        """Every live session, oldest first."""
        ...

    async def advance(
        self, session_id: str, before: SessionLifecycle, after: SessionLifecycle
    ) -> bool:
        """Moves the session from ``before`` to ``after`` if it is in
        ``before`` (atomically); False otherwise. To ``DELETED``, the record
        goes: nothing of a deleted session is kept."""
        ...

    async def remove(self, session_id: str) -> bool:
        """Forgets a session no run used, whatever its lifecycle (a refused
        Run's, a creation whose files failed); False when it was not indexed."""
        ...

    async def recorded(self, session_id: str, message_count: int, updated_at: str) -> None:
        """The trace holds ``message_count`` records, the last written at
        ``updated_at``. Absolute, not an increment: an update lost to an outage
        is made good by the next one. Never lowers the count (a trace only
        grows): a late count of an owner paused past its lease does not undo
        the one of the replica that closed its run, from which the next run
        numbers its records."""
        ...

    async def mark_unclosed(self, session_id: str, reason: str | None) -> None:
        """Records that the trace holds a run open (``reason``: what to close it
        with), or, with None, that it no longer does."""
        ...

    async def set_approval_mode(self, session_id: str, mode: str) -> bool:
        """The session's own approval mode; False when the session is unknown."""
        ...


class MemorySessionIndex:
    """The embedded default: a dict. No method awaits, so each is atomic."""

    def __init__(self) -> None:
        self._records: dict[str, SessionRecord] = {}

    def open_for_run(self, session_id: str, *, new: bool) -> bool:
        """Whether a run may start on the session: it is live or, ``new`` (the
        Run that created it claims it), created, which this makes live. For
        ``MemoryRunLease.claim``, in the same step as the claim."""
        record = self._records.get(session_id)
        if record is None:
            return False
        if record.lifecycle is SessionLifecycle.LIVE:
            return True
        if new and record.lifecycle is SessionLifecycle.CREATED:
            self._records[session_id] = replace(record, lifecycle=SessionLifecycle.LIVE)
            return True
        return False

    async def add(self, record: SessionRecord, *, limit: int | None = None) -> bool:
        if record.session_id in self._records:
            return False
        if limit is not None and len(self._records) >= limit:
            raise LimitExceeded("max_sessions", limit)
        self._records[record.session_id] = record
        return True

    async def get(self, session_id: str) -> SessionRecord | None:
        return self._records.get(session_id)

    async def list(self) -> list[SessionRecord]:
        live = [r for r in self._records.values() if r.lifecycle is SessionLifecycle.LIVE]
        return sorted(live, key=lambda r: (r.created_at, r.session_id))

    async def advance(
        self, session_id: str, before: SessionLifecycle, after: SessionLifecycle
    ) -> bool:
        record = self._records.get(session_id)
        if record is None or record.lifecycle is not before:
            return False
        if after is SessionLifecycle.DELETED:
            del self._records[session_id]
        else:
            self._records[session_id] = replace(record, lifecycle=after)
        return True

    async def remove(self, session_id: str) -> bool:
        return self._records.pop(session_id, None) is not None

    async def recorded(self, session_id: str, message_count: int, updated_at: str) -> None:
        record = self._records.get(session_id)
        if record is not None and message_count >= record.message_count:
            self._records[session_id] = replace(
                record, message_count=message_count, updated_at=updated_at
            )

    async def mark_unclosed(self, session_id: str, reason: str | None) -> None:
        record = self._records.get(session_id)
        if record is not None:
            self._records[session_id] = replace(record, unclosed=reason)

    async def set_approval_mode(self, session_id: str, mode: str) -> bool:
        record = self._records.get(session_id)
        if record is None:
            return False
        self._records[session_id] = replace(record, approval_mode=mode)
        return True
