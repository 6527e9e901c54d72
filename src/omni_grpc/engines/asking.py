"""Asking the host for a tool call's decision while honouring abort."""

from __future__ import annotations

import asyncio
from typing import Any

from omni_grpc.engines.base import AbortSignal, ApproveFn, Decision


async def ask(approve: ApproveFn, call: dict[str, Any], abort: AbortSignal) -> Decision | None:
    """The host's decision on ``call``; None when the run is aborted first.

    A callback that raises, or answers something else, counts as ``deny``
    (the reference rule), so a broken host never lets a call through.
    """
    if abort.is_set():
        return None
    decision = asyncio.ensure_future(approve(call))
    waiter = asyncio.ensure_future(abort.wait())
    try:
        await asyncio.wait({decision, waiter}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
    if not decision.done():
        decision.cancel()
        return None
    try:
        answer = decision.result()
    except Exception:
        return Decision.DENY
    try:
        return Decision(answer)
    except ValueError:
        return Decision.DENY
