from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class StopReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STOP_REASON_UNSPECIFIED: _ClassVar[StopReason]
    STOP_REASON_COMPLETED: _ClassVar[StopReason]
    STOP_REASON_FAILED: _ClassVar[StopReason]
    STOP_REASON_ABORTED: _ClassVar[StopReason]
    STOP_REASON_TIMEOUT: _ClassVar[StopReason]
    STOP_REASON_MALFORMED: _ClassVar[StopReason]
    STOP_REASON_AUTH: _ClassVar[StopReason]

class Role(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ROLE_UNSPECIFIED: _ClassVar[Role]
    ROLE_USER: _ClassVar[Role]
    ROLE_ASSISTANT: _ClassVar[Role]

class EventType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EVENT_TYPE_UNSPECIFIED: _ClassVar[EventType]
    EVENT_TYPE_START: _ClassVar[EventType]
    EVENT_TYPE_DELTA: _ClassVar[EventType]
    EVENT_TYPE_STOP: _ClassVar[EventType]

class Sender(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SENDER_UNSPECIFIED: _ClassVar[Sender]
    SENDER_USER: _ClassVar[Sender]
    SENDER_PARENT_AGENT: _ClassVar[Sender]
    SENDER_HARNESS: _ClassVar[Sender]
    SENDER_SERVER: _ClassVar[Sender]

class Decision(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DECISION_UNSPECIFIED: _ClassVar[Decision]
    DECISION_ALLOW: _ClassVar[Decision]
    DECISION_DENY: _ClassVar[Decision]
    DECISION_FORBIDDEN: _ClassVar[Decision]

class CompactionReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    COMPACTION_REASON_UNSPECIFIED: _ClassVar[CompactionReason]
    COMPACTION_REASON_CONTEXT: _ClassVar[CompactionReason]
    COMPACTION_REASON_TURNS: _ClassVar[CompactionReason]
    COMPACTION_REASON_MANUAL: _ClassVar[CompactionReason]

class CompactionMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    COMPACTION_MODE_UNSPECIFIED: _ClassVar[CompactionMode]
    COMPACTION_MODE_SUMMARIZE: _ClassVar[CompactionMode]
    COMPACTION_MODE_DISCARD: _ClassVar[CompactionMode]

class GoalOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    GOAL_OUTCOME_UNSPECIFIED: _ClassVar[GoalOutcome]
    GOAL_OUTCOME_COMPLETE: _ClassVar[GoalOutcome]
    GOAL_OUTCOME_BLOCKED: _ClassVar[GoalOutcome]
    GOAL_OUTCOME_BUDGET_LIMITED: _ClassVar[GoalOutcome]
    GOAL_OUTCOME_ABORTED: _ClassVar[GoalOutcome]

class McpStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MCP_STATUS_UNSPECIFIED: _ClassVar[McpStatus]
    MCP_STATUS_COMPLETED: _ClassVar[McpStatus]
    MCP_STATUS_FAILED: _ClassVar[McpStatus]
    MCP_STATUS_ABORTED: _ClassVar[McpStatus]

class McpTransport(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MCP_TRANSPORT_UNSPECIFIED: _ClassVar[McpTransport]
    MCP_TRANSPORT_STDIO: _ClassVar[McpTransport]
    MCP_TRANSPORT_HTTP: _ClassVar[McpTransport]
    MCP_TRANSPORT_SSE: _ClassVar[McpTransport]

class SessionSource(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SESSION_SOURCE_UNSPECIFIED: _ClassVar[SessionSource]
    SESSION_SOURCE_SUBAGENT: _ClassVar[SessionSource]
    SESSION_SOURCE_SCHEDULE: _ClassVar[SessionSource]
STOP_REASON_UNSPECIFIED: StopReason
STOP_REASON_COMPLETED: StopReason
STOP_REASON_FAILED: StopReason
STOP_REASON_ABORTED: StopReason
STOP_REASON_TIMEOUT: StopReason
STOP_REASON_MALFORMED: StopReason
STOP_REASON_AUTH: StopReason
ROLE_UNSPECIFIED: Role
ROLE_USER: Role
ROLE_ASSISTANT: Role
EVENT_TYPE_UNSPECIFIED: EventType
EVENT_TYPE_START: EventType
EVENT_TYPE_DELTA: EventType
EVENT_TYPE_STOP: EventType
SENDER_UNSPECIFIED: Sender
SENDER_USER: Sender
SENDER_PARENT_AGENT: Sender
SENDER_HARNESS: Sender
SENDER_SERVER: Sender
DECISION_UNSPECIFIED: Decision
DECISION_ALLOW: Decision
DECISION_DENY: Decision
DECISION_FORBIDDEN: Decision
COMPACTION_REASON_UNSPECIFIED: CompactionReason
COMPACTION_REASON_CONTEXT: CompactionReason
COMPACTION_REASON_TURNS: CompactionReason
COMPACTION_REASON_MANUAL: CompactionReason
COMPACTION_MODE_UNSPECIFIED: CompactionMode
COMPACTION_MODE_SUMMARIZE: CompactionMode
COMPACTION_MODE_DISCARD: CompactionMode
GOAL_OUTCOME_UNSPECIFIED: GoalOutcome
GOAL_OUTCOME_COMPLETE: GoalOutcome
GOAL_OUTCOME_BLOCKED: GoalOutcome
GOAL_OUTCOME_BUDGET_LIMITED: GoalOutcome
GOAL_OUTCOME_ABORTED: GoalOutcome
MCP_STATUS_UNSPECIFIED: McpStatus
MCP_STATUS_COMPLETED: McpStatus
MCP_STATUS_FAILED: McpStatus
MCP_STATUS_ABORTED: McpStatus
MCP_TRANSPORT_UNSPECIFIED: McpTransport
MCP_TRANSPORT_STDIO: McpTransport
MCP_TRANSPORT_HTTP: McpTransport
MCP_TRANSPORT_SSE: McpTransport
SESSION_SOURCE_UNSPECIFIED: SessionSource
SESSION_SOURCE_SUBAGENT: SessionSource
SESSION_SOURCE_SCHEDULE: SessionSource

class OmniMessage(_message.Message):
    __slots__ = ("timestamp", "origin", "session_meta", "text", "image_url", "inline_data", "thinking", "inline_thinking", "tool_call", "tool_call_output", "partial_text", "partial_thinking", "partial_tool_call", "partial_tool_call_output", "approval_decision", "abort", "request_begin", "request_end", "token_usage", "compaction_begin", "compaction_end", "goal_finished", "subagent", "tool_list_ready", "mcp_connect_begin", "mcp_connect_end", "unknown", "key_orders", "raw_values", "zlib_record", "base64_values")
    TIMESTAMP_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_FIELD_NUMBER: _ClassVar[int]
    SESSION_META_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    IMAGE_URL_FIELD_NUMBER: _ClassVar[int]
    INLINE_DATA_FIELD_NUMBER: _ClassVar[int]
    THINKING_FIELD_NUMBER: _ClassVar[int]
    INLINE_THINKING_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    PARTIAL_TEXT_FIELD_NUMBER: _ClassVar[int]
    PARTIAL_THINKING_FIELD_NUMBER: _ClassVar[int]
    PARTIAL_TOOL_CALL_FIELD_NUMBER: _ClassVar[int]
    PARTIAL_TOOL_CALL_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    APPROVAL_DECISION_FIELD_NUMBER: _ClassVar[int]
    ABORT_FIELD_NUMBER: _ClassVar[int]
    REQUEST_BEGIN_FIELD_NUMBER: _ClassVar[int]
    REQUEST_END_FIELD_NUMBER: _ClassVar[int]
    TOKEN_USAGE_FIELD_NUMBER: _ClassVar[int]
    COMPACTION_BEGIN_FIELD_NUMBER: _ClassVar[int]
    COMPACTION_END_FIELD_NUMBER: _ClassVar[int]
    GOAL_FINISHED_FIELD_NUMBER: _ClassVar[int]
    SUBAGENT_FIELD_NUMBER: _ClassVar[int]
    TOOL_LIST_READY_FIELD_NUMBER: _ClassVar[int]
    MCP_CONNECT_BEGIN_FIELD_NUMBER: _ClassVar[int]
    MCP_CONNECT_END_FIELD_NUMBER: _ClassVar[int]
    UNKNOWN_FIELD_NUMBER: _ClassVar[int]
    KEY_ORDERS_FIELD_NUMBER: _ClassVar[int]
    RAW_VALUES_FIELD_NUMBER: _ClassVar[int]
    ZLIB_RECORD_FIELD_NUMBER: _ClassVar[int]
    BASE64_VALUES_FIELD_NUMBER: _ClassVar[int]
    timestamp: str
    origin: _containers.RepeatedScalarFieldContainer[str]
    session_meta: SessionMeta
    text: Text
    image_url: ImageUrl
    inline_data: InlineData
    thinking: Thinking
    inline_thinking: InlineThinking
    tool_call: ToolCall
    tool_call_output: ToolCallOutput
    partial_text: PartialText
    partial_thinking: PartialThinking
    partial_tool_call: PartialToolCall
    partial_tool_call_output: PartialToolCallOutput
    approval_decision: ApprovalDecision
    abort: Abort
    request_begin: RequestBegin
    request_end: RequestEnd
    token_usage: TokenUsage
    compaction_begin: CompactionBegin
    compaction_end: CompactionEnd
    goal_finished: GoalFinished
    subagent: Subagent
    tool_list_ready: ToolListReady
    mcp_connect_begin: McpConnectBegin
    mcp_connect_end: McpConnectEnd
    unknown: UnknownPayload
    key_orders: _containers.RepeatedCompositeFieldContainer[KeyOrder]
    raw_values: _containers.RepeatedCompositeFieldContainer[RawValue]
    zlib_record: bytes
    base64_values: _containers.RepeatedCompositeFieldContainer[Base64Value]
    def __init__(self, timestamp: _Optional[str] = ..., origin: _Optional[_Iterable[str]] = ..., session_meta: _Optional[_Union[SessionMeta, _Mapping]] = ..., text: _Optional[_Union[Text, _Mapping]] = ..., image_url: _Optional[_Union[ImageUrl, _Mapping]] = ..., inline_data: _Optional[_Union[InlineData, _Mapping]] = ..., thinking: _Optional[_Union[Thinking, _Mapping]] = ..., inline_thinking: _Optional[_Union[InlineThinking, _Mapping]] = ..., tool_call: _Optional[_Union[ToolCall, _Mapping]] = ..., tool_call_output: _Optional[_Union[ToolCallOutput, _Mapping]] = ..., partial_text: _Optional[_Union[PartialText, _Mapping]] = ..., partial_thinking: _Optional[_Union[PartialThinking, _Mapping]] = ..., partial_tool_call: _Optional[_Union[PartialToolCall, _Mapping]] = ..., partial_tool_call_output: _Optional[_Union[PartialToolCallOutput, _Mapping]] = ..., approval_decision: _Optional[_Union[ApprovalDecision, _Mapping]] = ..., abort: _Optional[_Union[Abort, _Mapping]] = ..., request_begin: _Optional[_Union[RequestBegin, _Mapping]] = ..., request_end: _Optional[_Union[RequestEnd, _Mapping]] = ..., token_usage: _Optional[_Union[TokenUsage, _Mapping]] = ..., compaction_begin: _Optional[_Union[CompactionBegin, _Mapping]] = ..., compaction_end: _Optional[_Union[CompactionEnd, _Mapping]] = ..., goal_finished: _Optional[_Union[GoalFinished, _Mapping]] = ..., subagent: _Optional[_Union[Subagent, _Mapping]] = ..., tool_list_ready: _Optional[_Union[ToolListReady, _Mapping]] = ..., mcp_connect_begin: _Optional[_Union[McpConnectBegin, _Mapping]] = ..., mcp_connect_end: _Optional[_Union[McpConnectEnd, _Mapping]] = ..., unknown: _Optional[_Union[UnknownPayload, _Mapping]] = ..., key_orders: _Optional[_Iterable[_Union[KeyOrder, _Mapping]]] = ..., raw_values: _Optional[_Iterable[_Union[RawValue, _Mapping]]] = ..., zlib_record: _Optional[bytes] = ..., base64_values: _Optional[_Iterable[_Union[Base64Value, _Mapping]]] = ...) -> None: ...

class Base64Value(_message.Message):
    __slots__ = ("path", "data", "prefix", "url_safe")
    PATH_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    URL_SAFE_FIELD_NUMBER: _ClassVar[int]
    path: str
    data: bytes
    prefix: str
    url_safe: bool
    def __init__(self, path: _Optional[str] = ..., data: _Optional[bytes] = ..., prefix: _Optional[str] = ..., url_safe: _Optional[bool] = ...) -> None: ...

class KeyOrder(_message.Message):
    __slots__ = ("path", "keys")
    PATH_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    path: str
    keys: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, path: _Optional[str] = ..., keys: _Optional[_Iterable[str]] = ...) -> None: ...

class RawValue(_message.Message):
    __slots__ = ("path", "json")
    PATH_FIELD_NUMBER: _ClassVar[int]
    JSON_FIELD_NUMBER: _ClassVar[int]
    path: str
    json: str
    def __init__(self, path: _Optional[str] = ..., json: _Optional[str] = ...) -> None: ...

class UnknownPayload(_message.Message):
    __slots__ = ("type", "json", "envelope_type")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    JSON_FIELD_NUMBER: _ClassVar[int]
    ENVELOPE_TYPE_FIELD_NUMBER: _ClassVar[int]
    type: str
    json: str
    envelope_type: str
    def __init__(self, type: _Optional[str] = ..., json: _Optional[str] = ..., envelope_type: _Optional[str] = ...) -> None: ...

class SessionMeta(_message.Message):
    __slots__ = ("session_id", "provider", "model_id", "model_context_window_tokens", "model_context_window_label", "system_prompt", "tools", "thinking_level", "agent_state", "workspace", "source")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PROVIDER_FIELD_NUMBER: _ClassVar[int]
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_CONTEXT_WINDOW_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MODEL_CONTEXT_WINDOW_LABEL_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_PROMPT_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    THINKING_LEVEL_FIELD_NUMBER: _ClassVar[int]
    AGENT_STATE_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    provider: str
    model_id: str
    model_context_window_tokens: int
    model_context_window_label: str
    system_prompt: str
    tools: _containers.RepeatedCompositeFieldContainer[ToolDefinition]
    thinking_level: str
    agent_state: str
    workspace: str
    source: SessionSource
    def __init__(self, session_id: _Optional[str] = ..., provider: _Optional[str] = ..., model_id: _Optional[str] = ..., model_context_window_tokens: _Optional[int] = ..., model_context_window_label: _Optional[str] = ..., system_prompt: _Optional[str] = ..., tools: _Optional[_Iterable[_Union[ToolDefinition, _Mapping]]] = ..., thinking_level: _Optional[str] = ..., agent_state: _Optional[str] = ..., workspace: _Optional[str] = ..., source: _Optional[_Union[SessionSource, str]] = ...) -> None: ...

class ToolDefinition(_message.Message):
    __slots__ = ("name", "description", "parameters")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    name: str
    description: str
    parameters: str
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., parameters: _Optional[str] = ...) -> None: ...

class Text(_message.Message):
    __slots__ = ("role", "text", "stop_reason", "fidelity", "sender", "phase", "signature", "fidelity_json")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    STOP_REASON_FIELD_NUMBER: _ClassVar[int]
    FIDELITY_FIELD_NUMBER: _ClassVar[int]
    SENDER_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    FIDELITY_JSON_FIELD_NUMBER: _ClassVar[int]
    role: Role
    text: str
    stop_reason: StopReason
    fidelity: _struct_pb2.Struct
    sender: Sender
    phase: str
    signature: str
    fidelity_json: str
    def __init__(self, role: _Optional[_Union[Role, str]] = ..., text: _Optional[str] = ..., stop_reason: _Optional[_Union[StopReason, str]] = ..., fidelity: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., sender: _Optional[_Union[Sender, str]] = ..., phase: _Optional[str] = ..., signature: _Optional[str] = ..., fidelity_json: _Optional[str] = ...) -> None: ...

class ImageUrl(_message.Message):
    __slots__ = ("role", "image_url", "stop_reason")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    IMAGE_URL_FIELD_NUMBER: _ClassVar[int]
    STOP_REASON_FIELD_NUMBER: _ClassVar[int]
    role: Role
    image_url: str
    stop_reason: StopReason
    def __init__(self, role: _Optional[_Union[Role, str]] = ..., image_url: _Optional[str] = ..., stop_reason: _Optional[_Union[StopReason, str]] = ...) -> None: ...

class InlineData(_message.Message):
    __slots__ = ("role", "data", "mime_type", "stop_reason", "fidelity", "signature", "fidelity_json")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    MIME_TYPE_FIELD_NUMBER: _ClassVar[int]
    STOP_REASON_FIELD_NUMBER: _ClassVar[int]
    FIDELITY_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    FIDELITY_JSON_FIELD_NUMBER: _ClassVar[int]
    role: Role
    data: str
    mime_type: str
    stop_reason: StopReason
    fidelity: _struct_pb2.Struct
    signature: str
    fidelity_json: str
    def __init__(self, role: _Optional[_Union[Role, str]] = ..., data: _Optional[str] = ..., mime_type: _Optional[str] = ..., stop_reason: _Optional[_Union[StopReason, str]] = ..., fidelity: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., signature: _Optional[str] = ..., fidelity_json: _Optional[str] = ...) -> None: ...

class Thinking(_message.Message):
    __slots__ = ("role", "thinking", "stop_reason", "fidelity", "signature", "fidelity_json")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    THINKING_FIELD_NUMBER: _ClassVar[int]
    STOP_REASON_FIELD_NUMBER: _ClassVar[int]
    FIDELITY_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    FIDELITY_JSON_FIELD_NUMBER: _ClassVar[int]
    role: Role
    thinking: str
    stop_reason: StopReason
    fidelity: _struct_pb2.Struct
    signature: str
    fidelity_json: str
    def __init__(self, role: _Optional[_Union[Role, str]] = ..., thinking: _Optional[str] = ..., stop_reason: _Optional[_Union[StopReason, str]] = ..., fidelity: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., signature: _Optional[str] = ..., fidelity_json: _Optional[str] = ...) -> None: ...

class InlineThinking(_message.Message):
    __slots__ = ("role", "data", "mime_type", "stop_reason", "fidelity", "signature", "fidelity_json")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    MIME_TYPE_FIELD_NUMBER: _ClassVar[int]
    STOP_REASON_FIELD_NUMBER: _ClassVar[int]
    FIDELITY_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    FIDELITY_JSON_FIELD_NUMBER: _ClassVar[int]
    role: Role
    data: str
    mime_type: str
    stop_reason: StopReason
    fidelity: _struct_pb2.Struct
    signature: str
    fidelity_json: str
    def __init__(self, role: _Optional[_Union[Role, str]] = ..., data: _Optional[str] = ..., mime_type: _Optional[str] = ..., stop_reason: _Optional[_Union[StopReason, str]] = ..., fidelity: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., signature: _Optional[str] = ..., fidelity_json: _Optional[str] = ...) -> None: ...

class ToolCall(_message.Message):
    __slots__ = ("role", "name", "arguments", "tool_call_id", "stop_reason", "fidelity", "signature", "fidelity_json")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    STOP_REASON_FIELD_NUMBER: _ClassVar[int]
    FIDELITY_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    FIDELITY_JSON_FIELD_NUMBER: _ClassVar[int]
    role: Role
    name: str
    arguments: str
    tool_call_id: str
    stop_reason: StopReason
    fidelity: _struct_pb2.Struct
    signature: str
    fidelity_json: str
    def __init__(self, role: _Optional[_Union[Role, str]] = ..., name: _Optional[str] = ..., arguments: _Optional[str] = ..., tool_call_id: _Optional[str] = ..., stop_reason: _Optional[_Union[StopReason, str]] = ..., fidelity: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., signature: _Optional[str] = ..., fidelity_json: _Optional[str] = ...) -> None: ...

class ToolCallOutput(_message.Message):
    __slots__ = ("role", "output", "images", "tool_call_id", "stop_reason")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    IMAGES_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    STOP_REASON_FIELD_NUMBER: _ClassVar[int]
    role: Role
    output: str
    images: _containers.RepeatedScalarFieldContainer[str]
    tool_call_id: str
    stop_reason: StopReason
    def __init__(self, role: _Optional[_Union[Role, str]] = ..., output: _Optional[str] = ..., images: _Optional[_Iterable[str]] = ..., tool_call_id: _Optional[str] = ..., stop_reason: _Optional[_Union[StopReason, str]] = ...) -> None: ...

class PartialText(_message.Message):
    __slots__ = ("role", "event_type", "text", "stop_reason")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    EVENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    STOP_REASON_FIELD_NUMBER: _ClassVar[int]
    role: Role
    event_type: EventType
    text: str
    stop_reason: StopReason
    def __init__(self, role: _Optional[_Union[Role, str]] = ..., event_type: _Optional[_Union[EventType, str]] = ..., text: _Optional[str] = ..., stop_reason: _Optional[_Union[StopReason, str]] = ...) -> None: ...

class PartialThinking(_message.Message):
    __slots__ = ("role", "event_type", "thinking", "stop_reason")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    EVENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    THINKING_FIELD_NUMBER: _ClassVar[int]
    STOP_REASON_FIELD_NUMBER: _ClassVar[int]
    role: Role
    event_type: EventType
    thinking: str
    stop_reason: StopReason
    def __init__(self, role: _Optional[_Union[Role, str]] = ..., event_type: _Optional[_Union[EventType, str]] = ..., thinking: _Optional[str] = ..., stop_reason: _Optional[_Union[StopReason, str]] = ...) -> None: ...

class PartialToolCall(_message.Message):
    __slots__ = ("role", "event_type", "name", "arguments", "tool_call_id", "stop_reason")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    EVENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    STOP_REASON_FIELD_NUMBER: _ClassVar[int]
    role: Role
    event_type: EventType
    name: str
    arguments: str
    tool_call_id: str
    stop_reason: StopReason
    def __init__(self, role: _Optional[_Union[Role, str]] = ..., event_type: _Optional[_Union[EventType, str]] = ..., name: _Optional[str] = ..., arguments: _Optional[str] = ..., tool_call_id: _Optional[str] = ..., stop_reason: _Optional[_Union[StopReason, str]] = ...) -> None: ...

class PartialToolCallOutput(_message.Message):
    __slots__ = ("role", "event_type", "output", "images", "tool_call_id", "stop_reason")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    EVENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    IMAGES_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    STOP_REASON_FIELD_NUMBER: _ClassVar[int]
    role: Role
    event_type: EventType
    output: str
    images: _containers.RepeatedScalarFieldContainer[str]
    tool_call_id: str
    stop_reason: StopReason
    def __init__(self, role: _Optional[_Union[Role, str]] = ..., event_type: _Optional[_Union[EventType, str]] = ..., output: _Optional[str] = ..., images: _Optional[_Iterable[str]] = ..., tool_call_id: _Optional[str] = ..., stop_reason: _Optional[_Union[StopReason, str]] = ...) -> None: ...

class ApprovalDecision(_message.Message):
    __slots__ = ("decision", "tool_call_id")
    DECISION_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    decision: Decision
    tool_call_id: str
    def __init__(self, decision: _Optional[_Union[Decision, str]] = ..., tool_call_id: _Optional[str] = ...) -> None: ...

class Abort(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class RequestBegin(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class RequestEnd(_message.Message):
    __slots__ = ("status", "message", "error_message", "attempt", "retry_in_ms")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    RETRY_IN_MS_FIELD_NUMBER: _ClassVar[int]
    status: StopReason
    message: str
    error_message: str
    attempt: int
    retry_in_ms: int
    def __init__(self, status: _Optional[_Union[StopReason, str]] = ..., message: _Optional[str] = ..., error_message: _Optional[str] = ..., attempt: _Optional[int] = ..., retry_in_ms: _Optional[int] = ...) -> None: ...

class TokenUsage(_message.Message):
    __slots__ = ("session", "request")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    session: TokenCounts
    request: TokenCounts
    def __init__(self, session: _Optional[_Union[TokenCounts, _Mapping]] = ..., request: _Optional[_Union[TokenCounts, _Mapping]] = ...) -> None: ...

class TokenCounts(_message.Message):
    __slots__ = ("cache_read", "cache_write", "output", "total")
    CACHE_READ_FIELD_NUMBER: _ClassVar[int]
    CACHE_WRITE_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    cache_read: int
    cache_write: int
    output: int
    total: int
    def __init__(self, cache_read: _Optional[int] = ..., cache_write: _Optional[int] = ..., output: _Optional[int] = ..., total: _Optional[int] = ...) -> None: ...

class CompactionBegin(_message.Message):
    __slots__ = ("reason", "mode", "context", "turns")
    REASON_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    TURNS_FIELD_NUMBER: _ClassVar[int]
    reason: CompactionReason
    mode: CompactionMode
    context: int
    turns: int
    def __init__(self, reason: _Optional[_Union[CompactionReason, str]] = ..., mode: _Optional[_Union[CompactionMode, str]] = ..., context: _Optional[int] = ..., turns: _Optional[int] = ...) -> None: ...

class CompactionEnd(_message.Message):
    __slots__ = ("reason", "mode", "status", "attempt", "error_message", "retry_in_ms")
    REASON_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RETRY_IN_MS_FIELD_NUMBER: _ClassVar[int]
    reason: CompactionReason
    mode: CompactionMode
    status: StopReason
    attempt: int
    error_message: str
    retry_in_ms: int
    def __init__(self, reason: _Optional[_Union[CompactionReason, str]] = ..., mode: _Optional[_Union[CompactionMode, str]] = ..., status: _Optional[_Union[StopReason, str]] = ..., attempt: _Optional[int] = ..., error_message: _Optional[str] = ..., retry_in_ms: _Optional[int] = ...) -> None: ...

class GoalFinished(_message.Message):
    __slots__ = ("outcome", "rounds", "tokens_used")
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    ROUNDS_FIELD_NUMBER: _ClassVar[int]
    TOKENS_USED_FIELD_NUMBER: _ClassVar[int]
    outcome: GoalOutcome
    rounds: int
    tokens_used: int
    def __init__(self, outcome: _Optional[_Union[GoalOutcome, str]] = ..., rounds: _Optional[int] = ..., tokens_used: _Optional[int] = ...) -> None: ...

class Subagent(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class ToolListReady(_message.Message):
    __slots__ = ("tools",)
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    tools: _containers.RepeatedCompositeFieldContainer[ToolDefinition]
    def __init__(self, tools: _Optional[_Iterable[_Union[ToolDefinition, _Mapping]]] = ...) -> None: ...

class McpConnectBegin(_message.Message):
    __slots__ = ("servers",)
    SERVERS_FIELD_NUMBER: _ClassVar[int]
    servers: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, servers: _Optional[_Iterable[str]] = ...) -> None: ...

class McpConnectEnd(_message.Message):
    __slots__ = ("status", "results")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    status: McpStatus
    results: _containers.RepeatedCompositeFieldContainer[McpServerResult]
    def __init__(self, status: _Optional[_Union[McpStatus, str]] = ..., results: _Optional[_Iterable[_Union[McpServerResult, _Mapping]]] = ...) -> None: ...

class McpServerResult(_message.Message):
    __slots__ = ("server", "transport", "status", "duration_ms", "tools", "error")
    SERVER_FIELD_NUMBER: _ClassVar[int]
    TRANSPORT_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    server: str
    transport: McpTransport
    status: McpStatus
    duration_ms: int
    tools: int
    error: str
    def __init__(self, server: _Optional[str] = ..., transport: _Optional[_Union[McpTransport, str]] = ..., status: _Optional[_Union[McpStatus, str]] = ..., duration_ms: _Optional[int] = ..., tools: _Optional[int] = ..., error: _Optional[str] = ...) -> None: ...
