"""Every JSON object of the protocol, with its keys in reference order.

Key order is the order the reference builders insert keys (digest section 2);
it is what ``serialize_message`` writes when the shape carries no key list.
"""

from __future__ import annotations

from typing import Any

from google.protobuf.descriptor import EnumDescriptor

from omni_grpc.convert._fields import (
    Enum,
    Fidelity,
    Field,
    Int,
    JsonText,
    Nested,
    NumberOrLabel,
    OptInt,
    OptStr,
    Str,
    StrList,
)
from omni_grpc_proto.omni.v1 import agent_service_pb2, omni_pb2


def enum_texts(descriptor: EnumDescriptor) -> dict[str, int]:
    """JSON strings of a proto enum: STOP_REASON_BUDGET_LIMITED -> "budget_limited"."""
    prefix = len(descriptor.values[0].name) - len("UNSPECIFIED")
    return {v.name[prefix:].lower(): v.number for v in descriptor.values if v.number != 0}


class ObjectSpec:
    """One JSON object type: its fields in reference order.

    ``type_text`` is set for payloads and server events, whose first key is
    ``"type"``; ``arm`` names their oneof arm.
    """

    __slots__ = ("arm", "by_key", "fields", "message", "type_text")

    def __init__(
        self,
        message: Any,
        fields: list[Field],
        *,
        type_text: str | None = None,
        arm: str | None = None,
    ) -> None:
        self.message = message
        self.fields = fields
        self.by_key = {f.key: f for f in fields}
        self.type_text = type_text
        self.arm = arm


def _enum(key: str, descriptor: EnumDescriptor, name: str | None = None) -> Enum:
    return Enum(key, enum_texts(descriptor), name)


STOP_REASON = omni_pb2.StopReason.DESCRIPTOR
ROLE = omni_pb2.Role.DESCRIPTOR
EVENT_TYPE = omni_pb2.EventType.DESCRIPTOR


def _stop() -> Enum:
    return _enum("stop_reason", STOP_REASON)


def _role() -> Enum:
    return _enum("role", ROLE)


def _fidelity() -> Fidelity:
    return Fidelity("fidelity")


def _signature() -> OptStr:
    return OptStr("signature")


TOOL_DEFINITION = ObjectSpec(
    omni_pb2.ToolDefinition,
    [Str("name", required=True), Str("description", required=True), JsonText("parameters")],
)
TOKEN_COUNTS = ObjectSpec(
    omni_pb2.TokenCounts,
    [Int(k, required=True) for k in ("cache_read", "cache_write", "output", "total")],
)
MCP_SERVER_RESULT = ObjectSpec(
    omni_pb2.McpServerResult,
    [
        Str("server", required=True),
        _enum("transport", omni_pb2.McpTransport.DESCRIPTOR),
        _enum("status", omni_pb2.McpStatus.DESCRIPTOR),
        Int("duration_ms", required=True),
        OptInt("tools"),
        OptStr("error"),
    ],
)

SESSION_META = ObjectSpec(
    omni_pb2.SessionMeta,
    [
        Str("session_id", required=True),
        Str("provider", required=True),
        Str("model_id", required=True),
        NumberOrLabel(
            "model_context_window",
            "model_context_window_tokens",
            "model_context_window_label",
            "model_context_window",
        ),
        Str("system_prompt", required=True),
        Nested("tools", TOOL_DEFINITION, many=True, required=False),
        OptStr("thinking_level"),
        Str("agent_state", required=True),
        Str("workspace", required=True),
        _enum("source", omni_pb2.SessionSource.DESCRIPTOR),
    ],
    arm="session_meta",
)


def _payload(arm: str, message: Any, fields: list[Field]) -> ObjectSpec:
    return ObjectSpec(message, fields, type_text=arm, arm=arm)


def _partial(arm: str, message: Any, content: list[Field]) -> ObjectSpec:
    fields: list[Field] = [_role(), _enum("event_type", EVENT_TYPE), *content, _stop()]
    return _payload(arm, message, fields)


PAYLOADS: list[ObjectSpec] = [
    _payload(
        "text",
        omni_pb2.Text,
        [
            _role(),
            Str("text", required=True),
            _stop(),
            _fidelity(),
            _enum("sender", omni_pb2.Sender.DESCRIPTOR),
            OptStr("phase", nullable=True),
            _signature(),
        ],
    ),
    _payload("image_url", omni_pb2.ImageUrl, [_role(), Str("image_url", required=True), _stop()]),
    _payload(
        "inline_data",
        omni_pb2.InlineData,
        [
            _role(),
            Str("data", required=True),
            Str("mime_type", required=True),
            _stop(),
            _fidelity(),
            _signature(),
        ],
    ),
    _payload(
        "thinking",
        omni_pb2.Thinking,
        [_role(), Str("thinking", required=True), _stop(), _fidelity(), _signature()],
    ),
    _payload(
        "inline_thinking",
        omni_pb2.InlineThinking,
        [
            _role(),
            Str("data", required=True),
            Str("mime_type", required=True),
            _stop(),
            _fidelity(),
            _signature(),
        ],
    ),
    _payload(
        "tool_call",
        omni_pb2.ToolCall,
        [
            _role(),
            Str("name", required=True),
            Str("arguments", required=True),
            Str("tool_call_id", required=True),
            _stop(),
            _fidelity(),
            _signature(),
        ],
    ),
    _payload(
        "tool_call_output",
        omni_pb2.ToolCallOutput,
        [
            _role(),
            Str("output", required=True),
            StrList("images"),
            Str("tool_call_id", required=True),
            _stop(),
        ],
    ),
    _partial("partial_text", omni_pb2.PartialText, [Str("text", required=True)]),
    _partial("partial_thinking", omni_pb2.PartialThinking, [Str("thinking", required=True)]),
    _partial(
        "partial_tool_call",
        omni_pb2.PartialToolCall,
        [
            Str("name", required=True),
            Str("arguments", required=True),
            Str("tool_call_id", required=True),
        ],
    ),
    _partial(
        "partial_tool_call_output",
        omni_pb2.PartialToolCallOutput,
        [Str("output", required=True), StrList("images"), Str("tool_call_id", required=True)],
    ),
    _payload(
        "approval_decision",
        omni_pb2.ApprovalDecision,
        [_enum("decision", omni_pb2.Decision.DESCRIPTOR), Str("tool_call_id", required=True)],
    ),
    _payload("abort", omni_pb2.Abort, [OptStr("reason", required=True, nullable=True)]),
    _payload("request_begin", omni_pb2.RequestBegin, []),
    _payload(
        "request_end",
        omni_pb2.RequestEnd,
        [
            _enum("status", STOP_REASON),
            OptStr("message"),
            OptStr("error_message"),
            OptInt("attempt"),
            OptInt("retry_in_ms"),
        ],
    ),
    _payload(
        "token_usage",
        omni_pb2.TokenUsage,
        [Nested("session", TOKEN_COUNTS), Nested("request", TOKEN_COUNTS)],
    ),
    _payload(
        "compaction_begin",
        omni_pb2.CompactionBegin,
        [
            _enum("reason", omni_pb2.CompactionReason.DESCRIPTOR),
            _enum("mode", omni_pb2.CompactionMode.DESCRIPTOR),
            Int("context", required=True),
            Int("turns", required=True),
        ],
    ),
    _payload(
        "compaction_end",
        omni_pb2.CompactionEnd,
        [
            _enum("reason", omni_pb2.CompactionReason.DESCRIPTOR),
            _enum("mode", omni_pb2.CompactionMode.DESCRIPTOR),
            _enum("status", STOP_REASON),
            OptInt("attempt"),
            OptStr("error_message"),
            OptInt("retry_in_ms"),
        ],
    ),
    _payload(
        "goal_finished",
        omni_pb2.GoalFinished,
        [
            _enum("outcome", omni_pb2.GoalOutcome.DESCRIPTOR),
            Int("rounds", required=True),
            Int("tokens_used", required=True),
        ],
    ),
    _payload("subagent", omni_pb2.Subagent, [Str("session_id", required=True)]),
    _payload(
        "tool_list_ready", omni_pb2.ToolListReady, [Nested("tools", TOOL_DEFINITION, many=True)]
    ),
    _payload("mcp_connect_begin", omni_pb2.McpConnectBegin, [StrList("servers", required=True)]),
    _payload(
        "mcp_connect_end",
        omni_pb2.McpConnectEnd,
        [
            _enum("status", omni_pb2.McpStatus.DESCRIPTOR),
            Nested("results", MCP_SERVER_RESULT, many=True),
        ],
    ),
]
PAYLOAD_BY_TYPE = {str(spec.type_text): spec for spec in PAYLOADS}
PAYLOAD_BY_ARM = {str(spec.arm): spec for spec in [*PAYLOADS, SESSION_META]}


# The envelope "type" each payload arm travels in. Written out, not derived
# from field numbers: a test checks it against the proto's arms and the
# protocol vocabulary, so a new arm cannot land without its entry.
ENVELOPE_TYPE_OF_ARM: dict[str, str] = {
    "session_meta": "session_meta",
    "text": "model_msg",
    "image_url": "model_msg",
    "inline_data": "model_msg",
    "thinking": "model_msg",
    "inline_thinking": "model_msg",
    "tool_call": "model_msg",
    "tool_call_output": "model_msg",
    "partial_text": "model_msg",
    "partial_thinking": "model_msg",
    "partial_tool_call": "model_msg",
    "partial_tool_call_output": "model_msg",
    "approval_decision": "event_msg",
    "abort": "event_msg",
    "request_begin": "event_msg",
    "request_end": "event_msg",
    "token_usage": "event_msg",
    "compaction_begin": "event_msg",
    "compaction_end": "event_msg",
    "goal_finished": "event_msg",
    "subagent": "event_msg",
    "tool_list_ready": "event_msg",
    "mcp_connect_begin": "event_msg",
    "mcp_connect_end": "event_msg",
}
ENVELOPE_TYPES = frozenset(ENVELOPE_TYPE_OF_ARM.values())

# ---- server events (SSE "event: server_event", gRPC ServerEvent) ------------

SERVER_EVENTS: list[ObjectSpec] = [
    ObjectSpec(
        agent_service_pb2.TaskState,
        [_enum("state", agent_service_pb2.SessionState.DESCRIPTOR), OptInt("queued")],
        type_text="task_state",
        arm="task_state",
    ),
    ObjectSpec(
        agent_service_pb2.ResyncRequired, [], type_text="resync_required", arm="resync_required"
    ),
]
SERVER_EVENT_BY_TYPE = {str(spec.type_text): spec for spec in SERVER_EVENTS}
SERVER_EVENT_BY_ARM = {str(spec.arm): spec for spec in SERVER_EVENTS}
