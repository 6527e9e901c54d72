from google.protobuf import struct_pb2 as _struct_pb2
from omni_grpc_proto.omni.v1 import omni_pb2 as _omni_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ApprovalMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    APPROVAL_MODE_UNSPECIFIED: _ClassVar[ApprovalMode]
    APPROVAL_MODE_ALLOW_ALL: _ClassVar[ApprovalMode]
    APPROVAL_MODE_DENY_ALL: _ClassVar[ApprovalMode]
    APPROVAL_MODE_READ_ONLY: _ClassVar[ApprovalMode]
    APPROVAL_MODE_ASK: _ClassVar[ApprovalMode]

class ThinkingLevel(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    THINKING_LEVEL_UNSPECIFIED: _ClassVar[ThinkingLevel]
    THINKING_LEVEL_NONE: _ClassVar[ThinkingLevel]
    THINKING_LEVEL_LOW: _ClassVar[ThinkingLevel]
    THINKING_LEVEL_MEDIUM: _ClassVar[ThinkingLevel]
    THINKING_LEVEL_HIGH: _ClassVar[ThinkingLevel]
    THINKING_LEVEL_XHIGH: _ClassVar[ThinkingLevel]
    THINKING_LEVEL_MAX: _ClassVar[ThinkingLevel]

class SessionState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SESSION_STATE_UNSPECIFIED: _ClassVar[SessionState]
    SESSION_STATE_IDLE: _ClassVar[SessionState]
    SESSION_STATE_RUNNING: _ClassVar[SessionState]
    SESSION_STATE_COMPACTING: _ClassVar[SessionState]
APPROVAL_MODE_UNSPECIFIED: ApprovalMode
APPROVAL_MODE_ALLOW_ALL: ApprovalMode
APPROVAL_MODE_DENY_ALL: ApprovalMode
APPROVAL_MODE_READ_ONLY: ApprovalMode
APPROVAL_MODE_ASK: ApprovalMode
THINKING_LEVEL_UNSPECIFIED: ThinkingLevel
THINKING_LEVEL_NONE: ThinkingLevel
THINKING_LEVEL_LOW: ThinkingLevel
THINKING_LEVEL_MEDIUM: ThinkingLevel
THINKING_LEVEL_HIGH: ThinkingLevel
THINKING_LEVEL_XHIGH: ThinkingLevel
THINKING_LEVEL_MAX: ThinkingLevel
SESSION_STATE_UNSPECIFIED: SessionState
SESSION_STATE_IDLE: SessionState
SESSION_STATE_RUNNING: SessionState
SESSION_STATE_COMPACTING: SessionState

class RunRequest(_message.Message):
    __slots__ = ("session_id", "input", "prompt", "thinking_level", "approval_mode", "metadata", "detach_on_cancel", "include_json")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    THINKING_LEVEL_FIELD_NUMBER: _ClassVar[int]
    APPROVAL_MODE_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    DETACH_ON_CANCEL_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_JSON_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    input: _containers.RepeatedCompositeFieldContainer[_omni_pb2.OmniMessage]
    prompt: str
    thinking_level: ThinkingLevel
    approval_mode: ApprovalMode
    metadata: _struct_pb2.Struct
    detach_on_cancel: bool
    include_json: bool
    def __init__(self, session_id: _Optional[str] = ..., input: _Optional[_Iterable[_Union[_omni_pb2.OmniMessage, _Mapping]]] = ..., prompt: _Optional[str] = ..., thinking_level: _Optional[_Union[ThinkingLevel, str]] = ..., approval_mode: _Optional[_Union[ApprovalMode, str]] = ..., metadata: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., detach_on_cancel: _Optional[bool] = ..., include_json: _Optional[bool] = ...) -> None: ...

class RunResponse(_message.Message):
    __slots__ = ("event_id", "message", "event", "session_id", "json")
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    JSON_FIELD_NUMBER: _ClassVar[int]
    event_id: str
    message: _omni_pb2.OmniMessage
    event: ServerEvent
    session_id: str
    json: str
    def __init__(self, event_id: _Optional[str] = ..., message: _Optional[_Union[_omni_pb2.OmniMessage, _Mapping]] = ..., event: _Optional[_Union[ServerEvent, _Mapping]] = ..., session_id: _Optional[str] = ..., json: _Optional[str] = ...) -> None: ...

class AttachRequest(_message.Message):
    __slots__ = ("session_id", "after_event_id", "include_json")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    AFTER_EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_JSON_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    after_event_id: str
    include_json: bool
    def __init__(self, session_id: _Optional[str] = ..., after_event_id: _Optional[str] = ..., include_json: _Optional[bool] = ...) -> None: ...

class AttachResponse(_message.Message):
    __slots__ = ("event_id", "message", "event", "session_id", "json")
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    JSON_FIELD_NUMBER: _ClassVar[int]
    event_id: str
    message: _omni_pb2.OmniMessage
    event: ServerEvent
    session_id: str
    json: str
    def __init__(self, event_id: _Optional[str] = ..., message: _Optional[_Union[_omni_pb2.OmniMessage, _Mapping]] = ..., event: _Optional[_Union[ServerEvent, _Mapping]] = ..., session_id: _Optional[str] = ..., json: _Optional[str] = ...) -> None: ...

class ServerEvent(_message.Message):
    __slots__ = ("task_state", "approval_request", "resync_required", "unknown", "key_orders", "raw_values")
    TASK_STATE_FIELD_NUMBER: _ClassVar[int]
    APPROVAL_REQUEST_FIELD_NUMBER: _ClassVar[int]
    RESYNC_REQUIRED_FIELD_NUMBER: _ClassVar[int]
    UNKNOWN_FIELD_NUMBER: _ClassVar[int]
    KEY_ORDERS_FIELD_NUMBER: _ClassVar[int]
    RAW_VALUES_FIELD_NUMBER: _ClassVar[int]
    task_state: TaskState
    approval_request: ApprovalRequest
    resync_required: ResyncRequired
    unknown: UnknownServerEvent
    key_orders: _containers.RepeatedCompositeFieldContainer[_omni_pb2.KeyOrder]
    raw_values: _containers.RepeatedCompositeFieldContainer[_omni_pb2.RawValue]
    def __init__(self, task_state: _Optional[_Union[TaskState, _Mapping]] = ..., approval_request: _Optional[_Union[ApprovalRequest, _Mapping]] = ..., resync_required: _Optional[_Union[ResyncRequired, _Mapping]] = ..., unknown: _Optional[_Union[UnknownServerEvent, _Mapping]] = ..., key_orders: _Optional[_Iterable[_Union[_omni_pb2.KeyOrder, _Mapping]]] = ..., raw_values: _Optional[_Iterable[_Union[_omni_pb2.RawValue, _Mapping]]] = ...) -> None: ...

class TaskState(_message.Message):
    __slots__ = ("state", "queued")
    STATE_FIELD_NUMBER: _ClassVar[int]
    QUEUED_FIELD_NUMBER: _ClassVar[int]
    state: SessionState
    queued: int
    def __init__(self, state: _Optional[_Union[SessionState, str]] = ..., queued: _Optional[int] = ...) -> None: ...

class ApprovalRequest(_message.Message):
    __slots__ = ("tool_call", "origin")
    TOOL_CALL_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_FIELD_NUMBER: _ClassVar[int]
    tool_call: _omni_pb2.OmniMessage
    origin: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, tool_call: _Optional[_Union[_omni_pb2.OmniMessage, _Mapping]] = ..., origin: _Optional[_Iterable[str]] = ...) -> None: ...

class ResyncRequired(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class UnknownServerEvent(_message.Message):
    __slots__ = ("type", "json")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    JSON_FIELD_NUMBER: _ClassVar[int]
    type: str
    json: str
    def __init__(self, type: _Optional[str] = ..., json: _Optional[str] = ...) -> None: ...

class ApproveRequest(_message.Message):
    __slots__ = ("session_id", "tool_call_id", "decision")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ID_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    tool_call_id: str
    decision: _omni_pb2.Decision
    def __init__(self, session_id: _Optional[str] = ..., tool_call_id: _Optional[str] = ..., decision: _Optional[_Union[_omni_pb2.Decision, str]] = ...) -> None: ...

class ApproveResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class AbortRequest(_message.Message):
    __slots__ = ("session_id", "reason")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    reason: str
    def __init__(self, session_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class AbortResponse(_message.Message):
    __slots__ = ("was_running",)
    WAS_RUNNING_FIELD_NUMBER: _ClassVar[int]
    was_running: bool
    def __init__(self, was_running: _Optional[bool] = ...) -> None: ...

class GetHistoryRequest(_message.Message):
    __slots__ = ("session_id", "include_json", "page_size", "page_token")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_JSON_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    include_json: bool
    page_size: int
    page_token: str
    def __init__(self, session_id: _Optional[str] = ..., include_json: _Optional[bool] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class GetHistoryResponse(_message.Message):
    __slots__ = ("message", "json", "next_page_token")
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    JSON_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    message: _omni_pb2.OmniMessage
    json: str
    next_page_token: str
    def __init__(self, message: _Optional[_Union[_omni_pb2.OmniMessage, _Mapping]] = ..., json: _Optional[str] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ListSessionsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListSessionsResponse(_message.Message):
    __slots__ = ("sessions",)
    SESSIONS_FIELD_NUMBER: _ClassVar[int]
    sessions: _containers.RepeatedCompositeFieldContainer[SessionInfo]
    def __init__(self, sessions: _Optional[_Iterable[_Union[SessionInfo, _Mapping]]] = ...) -> None: ...

class DeleteSessionRequest(_message.Message):
    __slots__ = ("session_id", "delete_trace")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    DELETE_TRACE_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    delete_trace: bool
    def __init__(self, session_id: _Optional[str] = ..., delete_trace: _Optional[bool] = ...) -> None: ...

class DeleteSessionResponse(_message.Message):
    __slots__ = ("was_running", "trace_deleted")
    WAS_RUNNING_FIELD_NUMBER: _ClassVar[int]
    TRACE_DELETED_FIELD_NUMBER: _ClassVar[int]
    was_running: bool
    trace_deleted: bool
    def __init__(self, was_running: _Optional[bool] = ..., trace_deleted: _Optional[bool] = ...) -> None: ...

class SessionInfo(_message.Message):
    __slots__ = ("session_id", "state", "created_at", "updated_at", "message_count", "last_event_id")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_COUNT_FIELD_NUMBER: _ClassVar[int]
    LAST_EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    state: SessionState
    created_at: str
    updated_at: str
    message_count: int
    last_event_id: str
    def __init__(self, session_id: _Optional[str] = ..., state: _Optional[_Union[SessionState, str]] = ..., created_at: _Optional[str] = ..., updated_at: _Optional[str] = ..., message_count: _Optional[int] = ..., last_event_id: _Optional[str] = ...) -> None: ...
