"""An approval is decided exactly once, and Approve answers with that decision.

Approve(allow) that races ``--max-approval-wait`` used to return OK while the
call was denied for want of a decision (1 in 58 on memory, 13 in 62 on
Redis). Here many asks are each approved at a different moment around the
deadline, on the run's own replica (memory) or on another one (Redis): every
Approve that answered OK must have its ``allow`` recorded and the tool run,
and every one refused as not pending must find the wait's own outcome
recorded, never both and never neither.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from omni_grpc import protocol
from omni_grpc.convert import message_from_dict
from omni_grpc.engines.demo import DemoEngine
from omni_grpc.runtime.approvals import ApprovalMode
from omni_grpc.runtime.backend import Backend
from omni_grpc.runtime.errors import ApprovalNotPending
from omni_grpc.runtime.event_log import Subscription
from omni_grpc.runtime.hub import Hub, RunRequest
from omni_grpc.runtime.limits import Limits
from omni_grpc_proto.omni.v1 import agent_service_pb2 as pb
from omni_grpc_proto.omni.v1 import omni_pb2

WAIT = 0.4  # the approval wait, seconds
TRIALS = 40
WAIT_FOR = 60.0  # a safety net against hangs
IDLE = pb.SESSION_STATE_IDLE


def ask_request() -> RunRequest:
    return RunRequest(
        input=[message_from_dict(protocol.user_text("list it"))],
        approval_mode=ApprovalMode.ASK,
    )


async def until_asked(sub: Subscription) -> str:
    async for event in sub:
        ev = event.server_event
        if ev is not None and ev.HasField("approval_request"):
            return ev.approval_request.tool_call.tool_call.tool_call_id
    raise AssertionError("the run ended without asking")


async def rest(sub: Subscription) -> list[omni_pb2.OmniMessage]:
    out = []
    async for event in sub:
        if event.message is not None:
            out.append(event.message)
        ev = event.server_event
        if ev is not None and ev.HasField("task_state") and ev.task_state.state == IDLE:
            return out
    raise AssertionError("the run did not end")


async def trial(runner: Hub, approver: Hub, offset: float) -> tuple[str, str]:
    """(what Approve answered, what the run recorded)."""
    session_id, sub = await runner.run(ask_request())
    tool_call_id = await until_asked(sub)
    await asyncio.sleep(offset)  # the moment under test, not a wait for a condition
    try:
        await approver.approve(session_id, tool_call_id, "allow")
        answered = "ok"
    except ApprovalNotPending:
        answered = "not_pending"
    messages = await rest(sub)
    decisions = [m.approval_decision for m in messages if m.HasField("approval_decision")]
    [output] = [m.tool_call_output for m in messages if m.HasField("tool_call_output")]
    if decisions:
        assert [d.decision for d in decisions] == [omni_pb2.DECISION_ALLOW]
        assert output.stop_reason != omni_pb2.STOP_REASON_TIMEOUT
        return answered, "allowed"
    assert output.stop_reason == omni_pb2.STOP_REASON_TIMEOUT
    return answered, "timed_out"


async def test_an_approve_racing_the_wait_gets_the_decision_recorded(
    backend_kind: str, make_backend: Callable[..., Backend], tmp_path: Path
) -> None:
    limits = Limits(approval_wait=WAIT, max_runs=TRIALS + 1)
    shared = f"race-{backend_kind}-{id(limits)}:"
    runner = Hub(
        DemoEngine(), tmp_path / "data", backend=make_backend(prefix=shared), limits=limits
    )
    approver = runner
    if backend_kind == "redis":  # Approve on another replica, through the owner's inbox
        approver = Hub(
            DemoEngine(), tmp_path / "data", backend=make_backend(prefix=shared), limits=limits
        )
        await approver.start()
    # Offsets from the ask's arrival, spread over the last tenth of a second
    # before the deadline and just past it.
    offsets = [WAIT - 0.12 + 0.15 * i / TRIALS for i in range(TRIALS)]
    results = await asyncio.wait_for(
        asyncio.gather(*(trial(runner, approver, o) for o in offsets)), WAIT_FOR
    )
    wrong = [
        (o, r)
        for o, r in zip(offsets, results, strict=True)
        if r not in {("ok", "allowed"), ("not_pending", "timed_out")}
    ]
    assert wrong == []
    # Both outcomes happened: the race was really run.
    assert {r for r in results} == {("ok", "allowed"), ("not_pending", "timed_out")}
    await runner.shutdown()
    if approver is not runner:
        await approver.shutdown()
