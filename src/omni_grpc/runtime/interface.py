"""The runtime as transports see it: the one module a transport imports.

``Runtime`` is what every transport (gRPC, HTTP/SSE, and those to come)
calls; ``runtime.hub.Hub`` is its implementation, which no transport names.
The request and answer types, the policy a transport enforces before it
calls, and the event types a subscription yields are re-exported here, so a
transport needs nothing else from the runtime but ``runtime.errors`` (its
errors, each with one code, and the table of their statuses).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Protocol

from omni_grpc.engines.base import JsonObject
from omni_grpc.runtime.bodies import is_resync, is_task_end
from omni_grpc.runtime.call_context import ANONYMOUS, DEADLINE_REASON, BearerCheck, CallContext
from omni_grpc.runtime.event_log import Subscription
from omni_grpc.runtime.events import HubEvent, format_event_id, parse_event_id
from omni_grpc.runtime.health import DRAINING, HealthState
from omni_grpc.runtime.idempotency import IdempotencyKeys
from omni_grpc.runtime.live_tail import LiveTail
from omni_grpc.runtime.task_index import TaskRecord
from omni_grpc.runtime.task_ledger import request_failure, task_end
from omni_grpc.trace.window import Position, Window
from omni_grpc.vocabulary import AbortKind, ApprovalMode, SessionState
from omni_grpc_proto.omni.v1 import omni_pb2

__all__ = [
    "ANONYMOUS",
    "DEADLINE_REASON",
    "DRAINING",
    "ApprovalPolicy",
    "BearerCheck",
    "CallContext",
    "HealthState",
    "HubEvent",
    "IdempotencyKeys",
    "LiveTail",
    "RunRequest",
    "Runtime",
    "SessionInfo",
    "Subscription",
    "TaskRecord",
    "format_event_id",
    "is_resync",
    "is_task_end",
    "parse_event_id",
    "request_failure",
    "task_end",
]


@dataclass
class RunRequest:
    """What a transport asks the hub to run (already decoded from its wire form)."""

    input: list[omni_pb2.OmniMessage]
    session_id: str | None = None
    thinking_level: str | None = None
    approval_mode: ApprovalMode | None = None
    metadata: JsonObject = field(default_factory=dict)
    # The id the client gave the run's input message (A2A's ``messageId``):
    # the task index keeps it.
    message_id: str | None = None


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
    # The mode a task that names none runs under: the session's own, else the
    # server's default.
    approval_mode: str = ApprovalMode.ALLOW_ALL.value
    pending_approvals: int = 0
    # The shard new records go to; None until the first run writes one.
    trace_path: str | None = None

    @property
    def has_trace(self) -> bool:
        return self.trace_path is not None


@dataclass(frozen=True)
class ApprovalPolicy:
    """The operator's approval policy: the mode a run that names none gets, and
    the modes a client may ask for (a run asking for another is refused)."""

    default: ApprovalMode
    client_modes: tuple[ApprovalMode, ...]


class Runtime(Protocol):
    """Sessions, runs and their events; every method raises ``HubError``s only
    for a refused request (``SessionNotFound`` for an unknown session id)."""

    @property
    def health(self) -> HealthState:
        """Whether the server can take runs now, and what is wrong if not."""
        ...

    @property
    def approval_policy(self) -> ApprovalPolicy: ...

    @property
    def idempotency_keys(self) -> IdempotencyKeys:
        """The answers of requests sent with an ``Idempotency-Key``, shared
        by every replica (runtime/idempotency.py)."""
        ...

    @property
    def engine_max_attempts(self) -> int | None:
        """The attempts the engine makes per model request, if it says."""
        ...

    async def list_sessions(self) -> list[SessionInfo]: ...

    async def create_session(self, approval_mode: ApprovalMode | None = None) -> SessionInfo:
        """A new idle session; ``approval_mode`` is its own (a client mode)."""
        ...

    async def set_approval_mode(self, session_id: str, mode: ApprovalMode) -> SessionInfo:
        """Changes the session's own approval mode; a running task applies it
        from its next tool call."""
        ...

    async def session_info(self, session_id: str) -> SessionInfo: ...

    async def require_session(self, session_id: str) -> None:
        """Raises ``SessionNotFound`` for an unknown session: one index read,
        for a transport that needs a 404 and nothing of the session."""
        ...

    def new_session_model(self) -> tuple[str, str]:
        """``(provider, model_id)`` that a session created now would record."""
        ...

    async def run(
        self, request: RunRequest, context: CallContext | None = None
    ) -> tuple[str, Subscription]:
        """Starts a run; its session id, and a subscription from its first event.
        ``context`` is the call's (``CallContext``): past its deadline the call
        is refused (``CallEnded``) and the run aborted."""
        ...

    async def attach(self, session_id: str, after_event_id: str | None) -> Subscription:
        """Replay after ``after_event_id`` (or a resync), then the live stream."""
        ...

    async def approve(self, session_id: str, tool_call_id: str, decision: str) -> None: ...

    async def abort(
        self, session_id: str, reason: str | None = None, kind: AbortKind = AbortKind.USER
    ) -> bool:
        """Aborts the session's run, wherever it runs; False when it is idle."""
        ...

    async def delete_session(self, session_id: str, *, delete_trace: bool = False) -> bool:
        """Ends the session (its running task aborted first); True when one ran."""
        ...

    async def task_record(self, session_id: str, event_id: str) -> TaskRecord | None:
        """A run of the session, named by its first event's id, for the
        session's lifetime (None: no such run)."""
        ...

    async def task_records(
        self,
        *,
        session_id: str | None = None,
        state: str | None = None,
        updated_after: float | None = None,
        offset: int = 0,
        limit: int = 50,
    ) -> tuple[list[TaskRecord], int]:
        """Runs newest first (``TaskIndex.page``); costs the runs returned."""
        ...

    async def history(self, session_id: str) -> AsyncIterator[omni_pb2.OmniMessage]: ...

    async def history_shards(
        self, session_id: str
    ) -> list[tuple[int, list[omni_pb2.OmniMessage]]]: ...

    async def history_window(
        self, session_id: str, limit: int, before: Position | None = None
    ) -> Window:
        """The newest ``limit`` tasks before ``before``; costs the window."""
        ...

    async def live_tail(self, session_id: str) -> LiveTail | None: ...

    async def replay_window(self, session_id: str) -> list[HubEvent]:
        """Every event the session's log still keeps, oldest first (what
        ``attach`` could replay now), from any replica."""
        ...
