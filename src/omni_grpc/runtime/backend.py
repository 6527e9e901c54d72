"""The backend: where the state a second replica would need is kept.

The hub coordinates; everything it must share lives behind the interfaces
bundled here (event logs, session index, task index, run lease, control
channel, pending approvals, idempotency keys). ``memory_backend()`` keeps them
in this process: the embedded default, for one ``serve``.
``omni_grpc.runtime.redis.redis_backend(url)`` keeps them in Redis, so any
number of replicas serve any session.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from omni_grpc.runtime import bodies
from omni_grpc.runtime.control_channel import ControlChannel, MemoryControlChannel
from omni_grpc.runtime.event_log import EventLogs, ReplayWindow
from omni_grpc.runtime.idempotency import IdempotencyKeys, MemoryIdempotencyKeys
from omni_grpc.runtime.memory_log import MemoryEventLog, MemoryEventLogs
from omni_grpc.runtime.pending_approvals import MemoryPendingApprovals, PendingApprovals
from omni_grpc.runtime.run_lease import MemoryRunLease, RunLease
from omni_grpc.runtime.session_index import MemorySessionIndex, SessionIndex
from omni_grpc.runtime.task_index import MemoryTaskIndex, TaskIndex


async def _always_up() -> None:
    return None


async def _nothing() -> None:
    return None


@dataclass
class Backend:
    logs: EventLogs
    index: SessionIndex
    leases: RunLease
    control: ControlChannel
    approvals: PendingApprovals
    # "memory", or the Redis URL without its password (for the startup banner).
    name: str = "memory"
    # Seconds between looks for orphaned runs; None when runs cannot be orphaned.
    sweep_interval: float | None = None
    # Replicas share the data dir through this backend (each locks it shared).
    shared: bool = False
    # Raises BackendUnavailable when the shared state cannot be reached.
    ping: Callable[[], Awaitable[None]] = _always_up
    aclose: Callable[[], Awaitable[None]] = _nothing
    # The answers of task requests sent with an Idempotency-Key.
    idempotency: IdempotencyKeys = field(default_factory=MemoryIdempotencyKeys)
    # Every run of every session, for the session's lifetime (A2A's tasks).
    tasks: TaskIndex = field(default_factory=MemoryTaskIndex)


def memory_backend(
    window: ReplayWindow | None = None,
    *,
    idle_ttl: float = 30 * 60,
    log_factory: Callable[[str], MemoryEventLog] | None = None,
) -> Backend:
    """Everything in this process (the default; a restart keeps only traces)."""
    window = window or ReplayWindow()
    index = MemorySessionIndex()
    # A claim asks the index in the same step (no await between them).
    leases = MemoryRunLease(lambda sid, new: index.open_for_run(sid, new=new))
    logs = MemoryEventLogs(
        bodies.resync_required_body(),
        max_count=window.max_events,
        max_bytes=window.max_bytes,
        idle_ttl=idle_ttl,
        factory=log_factory,
        end_run=leases.release_token,
    )
    return Backend(
        logs=logs,
        index=index,
        leases=leases,
        control=MemoryControlChannel(),
        approvals=MemoryPendingApprovals(),
    )
