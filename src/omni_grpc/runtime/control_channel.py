"""The control channel: Approve and Abort reach the replica that runs the task.

Any replica takes the request; the run lease names the owner; the command goes
to the owner's inbox, which the owner reads once for all of its sessions.
A command carries the lease token it was aimed at, so one that arrives after
its run ended (or was taken over) is dropped rather than hitting a later run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol

CommandKind = Literal["abort", "approve"]


@dataclass(frozen=True)
class Command:
    session_id: str
    kind: CommandKind
    # The lease token of the run it targets (``LeaseOwner.token``): acted on
    # only by the run that holds it, never by the session's next run.
    token: int
    # abort: the reason (None: the default); approve: unused.
    reason: str | None = None
    # abort: who asked (an AbortKind's spelling).
    abort_kind: str = "user"
    # approve only.
    tool_call_id: str = ""
    decision: str = ""


CommandHandler = Callable[[Command], None]


class ControlChannel(Protocol):
    async def listen(self, replica: str, handler: CommandHandler) -> None:
        """Starts delivering this replica's commands to ``handler``, in order."""
        ...

    async def send(self, owner: str, command: Command) -> None:
        """Queues ``command`` for replica ``owner`` (at least once, in order)."""
        ...

    async def close(self) -> None: ...


class MemoryControlChannel:
    """One process: a command is handed to the listener directly."""

    def __init__(self) -> None:
        self._handlers: dict[str, CommandHandler] = {}

    async def listen(self, replica: str, handler: CommandHandler) -> None:
        self._handlers[replica] = handler

    async def send(self, owner: str, command: Command) -> None:
        handler = self._handlers.get(owner)
        if handler is not None:
            handler(command)

    async def close(self) -> None:
        self._handlers.clear()
