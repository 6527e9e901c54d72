"""Pending approvals: the asks of a session that wait for ``Approve``.

The owner of the run adds an ask before it publishes the ``approval_request``
and removes it once decided. Any replica lists them (every new subscriber is
sent them again) and takes one to resolve it: ``take`` removes the ask
atomically, so two Approves of one call cannot both win.
"""

from __future__ import annotations

from typing import Protocol

from omni_grpc.runtime.events import EventBody


class PendingApprovals(Protocol):
    async def add(self, session_id: str, tool_call_id: str, request: EventBody) -> None: ...

    async def take(self, session_id: str, tool_call_id: str) -> bool:
        """Removes the ask; False when it was not pending (already decided)."""
        ...

    async def list(self, session_id: str) -> list[EventBody]:
        """The ``approval_request`` bodies still open, oldest first."""
        ...

    async def clear(self, session_id: str) -> None: ...


class MemoryPendingApprovals:
    """The embedded default. No method awaits, so each is atomic."""

    def __init__(self) -> None:
        self._asks: dict[str, dict[str, EventBody]] = {}

    async def add(self, session_id: str, tool_call_id: str, request: EventBody) -> None:
        self._asks.setdefault(session_id, {})[tool_call_id] = request

    async def take(self, session_id: str, tool_call_id: str) -> bool:
        asks = self._asks.get(session_id, {})
        return asks.pop(tool_call_id, None) is not None

    async def list(self, session_id: str) -> list[EventBody]:
        return list(self._asks.get(session_id, {}).values())

    async def clear(self, session_id: str) -> None:
        self._asks.pop(session_id, None)
