"""Decoding AgentService requests into hub calls, naming the field at fault."""

from __future__ import annotations

from google.protobuf import json_format

from omni_grpc import protocol
from omni_grpc.convert import message_from_dict
from omni_grpc.protocol.run_input import InputProblem, check_run_input, tool_calls_made
from omni_grpc.runtime.errors import InvalidRequest
from omni_grpc.runtime.interface import RunRequest, Runtime
from omni_grpc.trace.window import Position, parse_cursor
from omni_grpc.vocabulary import ApprovalMode, Decision, ThinkingLevel
from omni_grpc_proto.omni.v1 import agent_service_pb2 as pb
from omni_grpc_proto.omni.v1 import omni_pb2

THINKING_LEVELS: dict[int, ThinkingLevel | None] = {
    pb.THINKING_LEVEL_UNSPECIFIED: None,
    pb.THINKING_LEVEL_NONE: ThinkingLevel.NONE,
    pb.THINKING_LEVEL_LOW: ThinkingLevel.LOW,
    pb.THINKING_LEVEL_MEDIUM: ThinkingLevel.MEDIUM,
    pb.THINKING_LEVEL_HIGH: ThinkingLevel.HIGH,
    pb.THINKING_LEVEL_XHIGH: ThinkingLevel.XHIGH,
    pb.THINKING_LEVEL_MAX: ThinkingLevel.MAX,
}
APPROVAL_MODES: dict[int, ApprovalMode | None] = {
    pb.APPROVAL_MODE_UNSPECIFIED: None,
    pb.APPROVAL_MODE_ALLOW_ALL: ApprovalMode.ALLOW_ALL,
    pb.APPROVAL_MODE_DENY_ALL: ApprovalMode.DENY_ALL,
    pb.APPROVAL_MODE_READ_ONLY: ApprovalMode.READ_ONLY,
    pb.APPROVAL_MODE_ASK: ApprovalMode.ASK,
}
DECISIONS: dict[int, Decision] = {
    omni_pb2.DECISION_ALLOW: Decision.ALLOW,
    omni_pb2.DECISION_DENY: Decision.DENY,
    omni_pb2.DECISION_FORBIDDEN: Decision.FORBIDDEN,
}


def run_request(request: pb.RunRequest) -> RunRequest:
    if request.thinking_level not in THINKING_LEVELS:
        raise InvalidRequest("thinking_level", f"unknown value {request.thinking_level}")
    if request.approval_mode not in APPROVAL_MODES:
        raise InvalidRequest("approval_mode", f"unknown value {request.approval_mode}")
    messages = list(request.input)
    if request.prompt:
        messages.append(message_from_dict(protocol.user_text(request.prompt)))
    if not messages:
        raise InvalidRequest("input", "set input messages or a prompt")
    metadata = json_format.MessageToDict(request.metadata) if request.HasField("metadata") else {}
    return RunRequest(
        input=messages,
        session_id=request.session_id or None,
        thinking_level=THINKING_LEVELS[request.thinking_level],
        approval_mode=APPROVAL_MODES[request.approval_mode],
        metadata=metadata,
    )


async def checked_run_request(hub: Runtime, request: pb.RunRequest) -> RunRequest:
    """``run_request``, refusing input the codec or the protocol rejects
    (protocol/run_input.py) before anything is recorded or published."""
    run = run_request(request)
    calls: set[str] = set()
    if request.session_id and any(m.HasField("tool_call_output") for m in run.input):
        calls = tool_calls_made([m async for m in await hub.history(request.session_id)])
    try:
        check_run_input(run.input, calls)
    except InputProblem as exc:
        raise InvalidRequest(exc.field, exc.reason) from None
    return run


def page_token(value: str) -> Position | None:
    """A GetHistory page token (a window cursor); None for the newest page."""
    if not value:
        return None
    cursor = parse_cursor(value)
    if cursor is None:
        raise InvalidRequest("page_token", f"not a token GetHistory gave out: {value!r}")
    return cursor


def require(value: str, field: str) -> str:
    if not value:
        raise InvalidRequest(field, "is required")
    return value


def decision(value: int) -> Decision:
    if value not in DECISIONS:
        raise InvalidRequest(
            "decision", "must be DECISION_ALLOW, DECISION_DENY or DECISION_FORBIDDEN"
        )
    return DECISIONS[value]
