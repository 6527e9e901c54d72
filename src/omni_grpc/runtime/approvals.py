"""Approval policies and the pending asks of one session (reference semantics).

Modes: ``allow-all``, ``deny-all``, ``read-only`` (tools the engine declares
read-only run, others are denied) and ``ask`` (an ``approval_request`` goes out
and the call waits, with no timeout, for ``Approve``). Pending asks are
re-sent to every new subscriber and resolve to ``deny`` when the run aborts.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from omni_grpc.engines.base import AbortSignal, ApproveFn, Decision, JsonObject
from omni_grpc.runtime.errors import ApprovalNotPending
from omni_grpc.runtime.events import EventBody
from omni_grpc.vocabulary import ApprovalMode as ApprovalMode

# The modes a client may pick when the operator names none: the operator's own
# and those that run no tool it would not. ``ask`` and ``read-only`` are not
# comparable (one lets a person allow any tool, the other runs read-only tools
# unasked), so neither includes the other; ``deny-all`` is within every mode.
_NARROWER: dict[ApprovalMode, tuple[ApprovalMode, ...]] = {
    ApprovalMode.ALLOW_ALL: (
        ApprovalMode.ALLOW_ALL,
        ApprovalMode.ASK,
        ApprovalMode.READ_ONLY,
        ApprovalMode.DENY_ALL,
    ),
    ApprovalMode.ASK: (ApprovalMode.ASK, ApprovalMode.DENY_ALL),
    ApprovalMode.READ_ONLY: (ApprovalMode.READ_ONLY, ApprovalMode.DENY_ALL),
    ApprovalMode.DENY_ALL: (ApprovalMode.DENY_ALL,),
}


def default_client_modes(operator_mode: ApprovalMode) -> tuple[ApprovalMode, ...]:
    return _NARROWER[operator_mode]


def parse_modes(text: str) -> tuple[ApprovalMode, ...]:
    """``ask,deny-all`` as modes, in the order given; ValueError names a bad one."""
    modes: list[ApprovalMode] = []
    for word in (w.strip() for w in text.split(",")):
        try:
            mode = ApprovalMode(word)
        except ValueError:
            known = ", ".join(m.value for m in ApprovalMode)
            raise ValueError(f"{word!r} is not an approval mode ({known})") from None
        if mode not in modes:
            modes.append(mode)
    return tuple(modes)


@dataclass
class PendingApproval:
    tool_call_id: str
    tool_call: JsonObject
    future: asyncio.Future[Decision]
    # The approval_request new subscribers are sent while this ask is open.
    request: EventBody | None


# Publishes the approval_request for a new ask and returns it (kept for re-sending).
AskPublisher = Callable[[JsonObject], Awaitable[EventBody]]


class ApprovalBroker:
    """The open asks of one session. ``make_approver`` builds a run's callback."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self._pending: dict[str, PendingApproval] = {}

    def pending(self) -> list[PendingApproval]:
        return list(self._pending.values())

    def resolve(self, tool_call_id: str, decision: Decision) -> None:
        pending = self._pending.get(tool_call_id)
        if pending is None or pending.future.done():
            raise ApprovalNotPending(self.session_id, tool_call_id)
        pending.future.set_result(decision)

    def deny_all(self) -> None:
        """Resolves every open ask as ``deny`` (the run is aborting)."""
        for pending in self._pending.values():
            if not pending.future.done():
                pending.future.set_result(Decision.DENY)

    def make_approver(
        self,
        mode: ApprovalMode,
        abort: AbortSignal,
        publish_ask: AskPublisher,
        is_read_only: Callable[[str], bool] = lambda _name: False,
    ) -> ApproveFn:
        async def approve(tool_call: JsonObject) -> Decision:
            if abort.is_set():
                return Decision.DENY
            payload = tool_call.get("payload", {})
            name = str(payload.get("name", ""))
            if mode is ApprovalMode.ALLOW_ALL:
                return Decision.ALLOW
            if mode is ApprovalMode.DENY_ALL:
                return Decision.DENY
            if mode is ApprovalMode.READ_ONLY:
                return Decision.ALLOW if is_read_only(name) else Decision.DENY
            return await self._ask(tool_call, str(payload.get("tool_call_id", "")), publish_ask)

        return approve

    async def _ask(
        self, tool_call: JsonObject, tool_call_id: str, publish_ask: AskPublisher
    ) -> Decision:
        future: asyncio.Future[Decision] = asyncio.get_running_loop().create_future()
        pending = PendingApproval(tool_call_id, tool_call, future, request=None)
        self._pending[tool_call_id] = pending
        try:
            pending.request = await publish_ask(tool_call)
            return await future
        finally:
            self._pending.pop(tool_call_id, None)
