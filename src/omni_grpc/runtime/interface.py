"""What transports ask of the runtime, and what it answers with."""

from __future__ import annotations

from dataclasses import dataclass, field

from omni_grpc.engines.base import JsonObject
from omni_grpc.runtime.approvals import ApprovalMode
from omni_grpc.vocabulary import SessionState
from omni_grpc_proto.omni.v1 import omni_pb2


@dataclass
class RunRequest:
    """What a transport asks the hub to run (already decoded from its wire form)."""

    input: list[omni_pb2.OmniMessage]
    session_id: str | None = None
    thinking_level: str | None = None
    approval_mode: ApprovalMode | None = None
    metadata: JsonObject = field(default_factory=dict)


@dataclass
class SessionInfo:
    session_id: str
    state: SessionState
    created_at: str
    updated_at: str
    message_count: int
    last_event_id: str | None
    # From the session_meta the trace opens with (or will, before the first run).
    provider: str = ""
    model_id: str = ""
    workspace: str = ""
    source: str | None = None
    # The mode a task that names none runs under (the server's default).
    approval_mode: str = ApprovalMode.ALLOW_ALL.value
    pending_approvals: int = 0
    # The shard new records go to; None until the first run writes one.
    trace_path: str | None = None

    @property
    def has_trace(self) -> bool:
        return self.trace_path is not None
