"""Sessions and the hub, over a backend of small interfaces.

The hub (``hub``) coordinates; what several replicas share sits behind the
interfaces, one per file: ``event_log``, ``session_index``, ``run_lease``,
``control_channel``, ``pending_approvals``, and ``trace_store`` for the JSONL
traces. ``backend.memory_backend()`` is the embedded default;
``runtime.redis.redis_backend(url)`` keeps the shared state in Redis.
"""

from omni_grpc.runtime.approvals import ApprovalBroker, ApprovalMode
from omni_grpc.runtime.backend import Backend, memory_backend
from omni_grpc.runtime.errors import (
    ApprovalNotPending,
    BackendUnavailable,
    Fenced,
    HubClosed,
    HubError,
    InvalidRequest,
    SessionBusy,
    SessionNotFound,
)
from omni_grpc.runtime.event_log import EventLog, EventLogs, ReplayWindow, Subscription
from omni_grpc.runtime.events import EventBody, HubEvent, format_event_id, parse_event_id
from omni_grpc.runtime.hub import Hub, RunRequest, SessionInfo
from omni_grpc.runtime.memory_log import MemoryEventLog

__all__ = [
    "ApprovalBroker",
    "ApprovalMode",
    "ApprovalNotPending",
    "Backend",
    "BackendUnavailable",
    "EventBody",
    "EventLog",
    "EventLogs",
    "Fenced",
    "Hub",
    "HubClosed",
    "HubError",
    "HubEvent",
    "InvalidRequest",
    "MemoryEventLog",
    "ReplayWindow",
    "RunRequest",
    "SessionBusy",
    "SessionInfo",
    "SessionNotFound",
    "Subscription",
    "format_event_id",
    "memory_backend",
    "parse_event_id",
]
