"""Approval policies and the pending asks of one session (reference semantics).

Modes: ``allow-all``, ``deny-all``, ``read-only`` (tools the engine declares
read-only run, others are denied) and ``ask`` (an ``approval_request`` goes out
and the call waits for ``Approve``). Pending asks are re-sent to every new
subscriber (``PendingApprovals``). An ask that ends with nobody's decision
(the run aborts or the server stops while it waits, or no decision came
within the broker's ``wait``, the operator's ``--max-approval-wait``) raises
``ApprovalUnanswered`` to the engine, which records what happened instead of
a ``deny`` nobody gave; a late ``Approve`` then finds nothing pending.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable, Callable

from omni_grpc.engines.base import AbortSignal, ApprovalUnanswered, ApproveFn, JsonObject
from omni_grpc.vocabulary import USER_ABORT_REASON, Decision, StopReason
from omni_grpc.vocabulary import ApprovalMode as ApprovalMode

log = logging.getLogger(__name__)

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


# Publishes the approval_request for a new ask (after recording it as pending).
AskPublisher = Callable[[str, JsonObject], Awaitable[None]]
# Forgets a decided ask in the shared pending store.
AskForgetter = Callable[[str], Awaitable[None]]
# The wait ran out: takes the ask for it (None), or returns the decision an
# Approve took it with first (``PendingApprovals.expire``).
AskExpirer = Callable[[str], Awaitable[Decision | None]]
# The mode in force now (a session's, which can change while its task runs).
ModeSource = Callable[[], Awaitable[ApprovalMode]]


class ApprovalBroker:
    """The open asks of one run, on the replica that runs it.

    Only the futures live here; what other replicas need to see (the
    ``approval_request`` of each open ask) is in ``PendingApprovals``.
    ``make_approver`` builds the run's callback.
    """

    def __init__(self, session_id: str, wait: float = math.inf) -> None:
        self.session_id = session_id
        # Seconds an ask waits for a decision before it is denied.
        self.wait = wait
        # None: the ask ended without a decision (the run is aborting).
        self._waiting: dict[str, asyncio.Future[Decision | None]] = {}

    def resolve(self, tool_call_id: str, decision: Decision) -> bool:
        """Settles a waiting ask; False when it is not waiting here."""
        future = self._waiting.get(tool_call_id)
        if future is None or future.done():
            return False
        future.set_result(decision)
        return True

    def end_all(self) -> None:
        """Ends every open ask with no decision (the run is aborting)."""
        for future in self._waiting.values():
            if not future.done():
                future.set_result(None)

    def make_approver(
        self,
        mode: ApprovalMode | ModeSource,
        abort: AbortSignal,
        publish_ask: AskPublisher,
        forget_ask: AskForgetter,
        is_read_only: Callable[[str], bool] = lambda _name: False,
        expire_ask: AskExpirer | None = None,
    ) -> ApproveFn:
        async def approve(tool_call: JsonObject) -> Decision:
            if abort.is_set():
                raise _aborted(abort)
            payload = tool_call.get("payload", {})
            name = str(payload.get("name", ""))
            # A session's mode is read again for every call: a change made
            # while a task runs applies to its next call, as in the reference.
            now = mode if isinstance(mode, ApprovalMode) else await mode()
            if now is ApprovalMode.ALLOW_ALL:
                return Decision.ALLOW
            if now is ApprovalMode.DENY_ALL:
                return Decision.DENY
            if now is ApprovalMode.READ_ONLY:
                return Decision.ALLOW if is_read_only(name) else Decision.DENY
            tool_call_id = str(payload.get("tool_call_id", ""))
            return await self._ask(
                tool_call, tool_call_id, publish_ask, forget_ask, abort, expire_ask
            )

        return approve

    async def _ask(
        self,
        tool_call: JsonObject,
        tool_call_id: str,
        publish_ask: AskPublisher,
        forget_ask: AskForgetter,
        abort: AbortSignal,
        expire_ask: AskExpirer | None = None,
    ) -> Decision:
        future: asyncio.Future[Decision | None] = asyncio.get_running_loop().create_future()
        self._waiting[tool_call_id] = future
        try:
            await publish_ask(tool_call_id, tool_call)
            if abort.is_set():  # the abort came while the ask was being published
                raise _aborted(abort)
            try:
                decision = await asyncio.wait_for(
                    asyncio.shield(future), None if math.isinf(self.wait) else self.wait
                )
            except TimeoutError:
                late = await _decided_late(future, tool_call_id, expire_ask)
                if late is not None:
                    return late
                log.warning(
                    "session %s: no decision on tool call %s within %gs; not run",
                    self.session_id,
                    tool_call_id,
                    self.wait,
                )
                raise ApprovalUnanswered(
                    StopReason.TIMEOUT, f"no approval decision within {self.wait:g} s"
                ) from None
            if decision is None:
                raise _aborted(abort)
            return decision
        finally:
            self._waiting.pop(tool_call_id, None)
            await forget_ask(tool_call_id)


async def _decided_late(
    future: asyncio.Future[Decision | None], tool_call_id: str, expire_ask: AskExpirer | None
) -> Decision | None:
    """At the deadline an Approve may have won already: its decision is the
    one recorded (its caller was told OK), not the wait's."""
    if future.done() and (decided := future.result()) is not None:
        return decided
    if expire_ask is None:
        return None
    return await expire_ask(tool_call_id)


def _aborted(abort: AbortSignal) -> ApprovalUnanswered:
    """The ask ended because the run did: the abort's own words say why."""
    return ApprovalUnanswered(StopReason.ABORTED, abort.reason or USER_ABORT_REASON)
