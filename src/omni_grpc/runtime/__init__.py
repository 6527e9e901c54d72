"""Sessions, the hub, its event log (interface + ring buffer) and approvals."""

from omni_grpc.runtime.approvals import ApprovalBroker, ApprovalMode
from omni_grpc.runtime.errors import (
    ApprovalNotPending,
    HubClosed,
    HubError,
    InvalidRequest,
    SessionBusy,
    SessionNotFound,
)
from omni_grpc.runtime.event_log import EventLog, Subscription
from omni_grpc.runtime.events import EventBody, HubEvent, format_event_id, parse_event_id
from omni_grpc.runtime.hub import Hub, RunRequest, SessionInfo
from omni_grpc.runtime.memory_log import MemoryEventLog

__all__ = [
    "ApprovalBroker",
    "ApprovalMode",
    "ApprovalNotPending",
    "EventBody",
    "EventLog",
    "Hub",
    "HubClosed",
    "HubError",
    "HubEvent",
    "InvalidRequest",
    "MemoryEventLog",
    "RunRequest",
    "SessionBusy",
    "SessionInfo",
    "SessionNotFound",
    "Subscription",
    "format_event_id",
    "parse_event_id",
]
