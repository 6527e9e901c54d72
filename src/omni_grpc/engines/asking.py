"""Asking the host for a tool call's decision while honouring abort."""

from __future__ import annotations

import asyncio
from typing import Any

from omni_grpc.engines.base import AbortSignal, ApprovalUnanswered, ApproveFn, Decision
from omni_grpc.vocabulary import USER_ABORT_REASON, StopReason


async def ask(approve: ApproveFn, call: dict[str, Any], abort: AbortSignal) -> Decision:
    """The host's decision on ``call``.

    Raises ``ApprovalUnanswered`` when nobody decided: the run was aborted
    first (then the abort's reason says why), or the host's wait ran out.
    A callback that raises anything else, or answers something else, counts
    as ``deny`` (the reference rule), so a broken host never lets a call
    through.
    """
    if abort.is_set():
        raise _aborted(abort)
    decision = asyncio.ensure_future(approve(call))
    waiter = asyncio.ensure_future(abort.wait())
    try:
        await asyncio.wait({decision, waiter}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
    if not decision.done():
        decision.cancel()
        raise _aborted(abort)
    try:
        answer = decision.result()
    except ApprovalUnanswered:
        raise
    except Exception:
        return Decision.DENY
    try:
        return Decision(answer)
    except ValueError:
        return Decision.DENY


def _aborted(abort: AbortSignal) -> ApprovalUnanswered:
    return ApprovalUnanswered(StopReason.ABORTED, abort.reason or USER_ABORT_REASON)
