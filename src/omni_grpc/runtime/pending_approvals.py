"""Pending approvals: the asks of a session that wait for ``Approve``.

The owner of the run adds an ask before it publishes the ``approval_request``
and removes it once decided. Any replica lists them (every new subscriber is
sent them again) and takes one to resolve it: ``take`` removes the ask
atomically, so two Approves of one call cannot both win.

The ask's own wait running out is one more contender: ``expire`` takes the
ask for the wait, or, when an Approve took it first, returns the decision
that Approve recorded in the same step. So each ask is decided exactly once,
and an Approve answered OK is always the decision the run records, however
close to the deadline it came (and whether or not its command has reached
the run's replica yet).
"""

from __future__ import annotations

from typing import Protocol

from omni_grpc.runtime.events import EventBody


class PendingApprovals(Protocol):
    async def add(self, session_id: str, tool_call_id: str, request: EventBody) -> None: ...

    async def take(self, session_id: str, tool_call_id: str, decision: str | None = None) -> bool:
        """Removes the ask, recording ``decision`` for ``expire`` in the same
        step; False when it was not pending (already decided). Without a
        decision (the owner forgetting a decided ask) a recorded one goes too."""
        ...

    async def expire(self, session_id: str, tool_call_id: str) -> str | None:
        """The ask's wait ran out: None when it was still pending (it is removed
        and the wait decides), else the decision an Approve took it with."""
        ...

    async def list(self, session_id: str) -> list[EventBody]:
        """The ``approval_request`` bodies still open, oldest first."""
        ...

    async def clear(self, session_id: str) -> None: ...


class MemoryPendingApprovals:
    """The embedded default. No method awaits, so each is atomic."""

    def __init__(self) -> None:
        self._asks: dict[str, dict[str, EventBody]] = {}
        self._decided: dict[str, dict[str, str]] = {}

    async def add(self, session_id: str, tool_call_id: str, request: EventBody) -> None:
        self._asks.setdefault(session_id, {})[tool_call_id] = request

    async def take(self, session_id: str, tool_call_id: str, decision: str | None = None) -> bool:
        taken = self._asks.get(session_id, {}).pop(tool_call_id, None) is not None
        decided = self._decided.setdefault(session_id, {})
        if taken and decision is not None:
            decided[tool_call_id] = decision
        elif decision is None:
            decided.pop(tool_call_id, None)
        return taken

    async def expire(self, session_id: str, tool_call_id: str) -> str | None:
        if self._asks.get(session_id, {}).pop(tool_call_id, None) is not None:
            return None
        return self._decided.get(session_id, {}).pop(tool_call_id, None)

    async def list(self, session_id: str) -> list[EventBody]:
        return list(self._asks.get(session_id, {}).values())

    async def clear(self, session_id: str) -> None:
        self._asks.pop(session_id, None)
        self._decided.pop(session_id, None)
