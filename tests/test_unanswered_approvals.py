"""A tool call whose approval nobody gave: aborted, the server stopping, or the
wait expired (tests/test_operator_limits.py). Nothing records a ``deny``
nobody made: no ``approval_decision``, and the call's output says what
happened with the reference's stop reasons (``aborted``, ``timeout``), on the
stream and in the trace alike."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from omni_grpc.engines.asking import ask
from omni_grpc.engines.base import AbortSignal, ApprovalUnanswered
from omni_grpc.runtime.approvals import ApprovalBroker, ApprovalMode
from omni_grpc.trace import read_jsonl
from omni_grpc.trace.validate import validate_records
from omni_grpc.vocabulary import AbortKind, Decision, StopReason
from omni_grpc_proto.omni.v1 import agent_service_pb2 as pb
from omni_grpc_proto.omni.v1 import agent_service_pb2_grpc, omni_pb2
from tests.conftest import ServerFactory

ASK = pb.APPROVAL_MODE_ASK


async def _until_asked(call: grpc.aio.UnaryStreamCall) -> list[pb.RunResponse]:
    seen = []
    async for response in call:
        seen.append(response)
        if response.HasField("event") and response.event.WhichOneof("kind") == "approval_request":
            return seen
    raise AssertionError("the run ended without asking")


def _messages(responses: list[pb.RunResponse]) -> list[omni_pb2.OmniMessage]:
    return [r.message for r in responses if r.HasField("message")]


def _check_closed_as(messages: list[omni_pb2.OmniMessage], reason: str) -> None:
    arms = [m.WhichOneof("payload") for m in messages]
    assert "approval_decision" not in arms, arms
    [output] = [m.tool_call_output for m in messages if m.HasField("tool_call_output")]
    assert output.stop_reason == omni_pb2.STOP_REASON_ABORTED
    assert output.output == f"Tool call not run: {reason}."
    assert "denied" not in output.output
    assert messages[-1].abort.reason == reason


@pytest.mark.parametrize(
    ("how", "reason"),
    [("abort", "aborted by user"), ("abort-with-reason", "changed my mind")],
)
async def test_an_abort_during_a_pending_approval_is_recorded_as_such(
    server_factory: ServerFactory, how: str, reason: str
) -> None:
    server = await server_factory()
    assert server.grpc is not None
    async with grpc.aio.insecure_channel(server.grpc.address) as channel:
        stub = agent_service_pb2_grpc.AgentServiceStub(channel)
        call = stub.Run(pb.RunRequest(prompt="hold on", approval_mode=ASK))
        seen = await _until_asked(call)
        session_id = seen[0].session_id
        given = reason if how == "abort-with-reason" else ""
        await stub.Abort(pb.AbortRequest(session_id=session_id, reason=given))
        seen += [r async for r in call]
        _check_closed_as(_messages(seen), reason)
        history = [
            r.message async for r in stub.GetHistory(pb.GetHistoryRequest(session_id=session_id))
        ]
    # The trace holds the same story, and it validates.
    [trace] = sorted(server.data_dir.glob("traces/*/*.jsonl"))  # type: ignore[union-attr]
    records = list(read_jsonl(trace))
    assert [r.message for r in records] == history
    _check_closed_as(history, reason)
    assert [i for i in validate_records(records, trace=True) if i.severity == "error"] == []


async def test_a_shutdown_during_a_pending_approval_says_the_server_stopped(
    server_factory: ServerFactory,
) -> None:
    server = await server_factory()
    assert server.grpc is not None and server.data_dir is not None
    async with grpc.aio.insecure_channel(server.grpc.address) as channel:
        stub = agent_service_pb2_grpc.AgentServiceStub(channel)
        call = stub.Run(pb.RunRequest(prompt="hold on", approval_mode=ASK))
        seen = await _until_asked(call)
        stopping = asyncio.create_task(server.stop())
        seen += [r async for r in call]
        await stopping
    reason = AbortKind.SHUTDOWN.default_reason
    _check_closed_as(_messages(seen), reason)
    [trace] = sorted(server.data_dir.glob("traces/*/*.jsonl"))
    _check_closed_as([r.message for r in read_jsonl(trace)], reason)


async def test_no_deny_leaks_when_the_abort_and_the_broker_race() -> None:
    """The abort sets the signal and ends the broker's asks in one step; the
    engine-side ``ask`` must report it as unanswered whichever wakes first."""
    for _ in range(50):
        await _abort_while_asking()


async def _abort_while_asking() -> None:
    broker = ApprovalBroker("s")
    abort = AbortSignal()
    asked = asyncio.Event()

    async def publish(_id: str, _call: dict[str, object]) -> None:
        asked.set()

    async def forget(_id: str) -> None:
        return None

    approve = broker.make_approver(ApprovalMode.ASK, abort, publish, forget)
    call = {"payload": {"type": "tool_call", "name": "x", "tool_call_id": "c1"}}
    asking = asyncio.ensure_future(ask(approve, call, abort))
    await asked.wait()
    abort.set("stop", AbortKind.USER)
    broker.end_all()
    with pytest.raises(ApprovalUnanswered) as unanswered:
        await asking
    assert unanswered.value.stop_reason == StopReason.ABORTED
    assert unanswered.value.reason == "stop"


async def test_a_decision_that_came_is_still_the_decision() -> None:
    broker = ApprovalBroker("s")
    abort = AbortSignal()
    asked = asyncio.Event()

    async def publish(_id: str, _call: dict[str, object]) -> None:
        asked.set()

    async def forget(_id: str) -> None:
        return None

    approve = broker.make_approver(ApprovalMode.ASK, abort, publish, forget)
    call = {"payload": {"type": "tool_call", "name": "x", "tool_call_id": "c1"}}
    asking = asyncio.ensure_future(ask(approve, call, abort))
    await asked.wait()
    assert broker.resolve("c1", Decision.DENY)
    assert await asking == Decision.DENY
