"""The Redis backend: any replica serves any session (``serve --redis-url``).

Events are Redis Streams with explicit ``<seq>`` ids; the run lease fences a
stale owner; Approve and Abort go to the owner's inbox; sessions and pending
approvals are hashes. See ``docs/deployment.md`` for the Redis settings
(AOF, ``noeviction``) that make an acknowledged event durable.
"""

from __future__ import annotations

from omni_grpc.runtime.backend import Backend
from omni_grpc.runtime.event_log import ReplayWindow
from omni_grpc.runtime.redis.connection import RedisConnection, redacted
from omni_grpc.runtime.redis.control_channel import RedisControlChannel
from omni_grpc.runtime.redis.event_log import RedisEventLog, RedisEventLogs
from omni_grpc.runtime.redis.idempotency import RedisIdempotencyKeys
from omni_grpc.runtime.redis.pending_approvals import RedisPendingApprovals
from omni_grpc.runtime.redis.run_lease import RedisRunLease
from omni_grpc.runtime.redis.session_index import RedisSessionIndex
from omni_grpc.runtime.redis.task_index import RedisTaskIndex

__all__ = ["RedisEventLog", "redis_backend"]

# The share of the owner-loss bound spent waiting for the lease to expire; the
# rest is the interval at which replicas look for orphaned runs.
_LEASE_SHARE = 0.75


def redis_backend(
    url: str,
    *,
    window: ReplayWindow | None = None,
    owner_loss_timeout: float = 12.0,
    idle_ttl: float = 30 * 60,
    prefix: str = "omni:",
) -> Backend:
    """The shared backend on the Redis at ``url`` (``redis://``, ``rediss://``
    or ``unix://``). A run whose replica dies is closed by another replica
    within ``owner_loss_timeout`` seconds."""
    if owner_loss_timeout <= 0:
        raise ValueError("owner_loss_timeout must be positive")
    conn = RedisConnection(url, prefix=prefix)
    ttl = owner_loss_timeout * _LEASE_SHARE
    return Backend(
        logs=RedisEventLogs(conn, window or ReplayWindow(), idle_ttl=idle_ttl),
        index=RedisSessionIndex(conn),
        leases=RedisRunLease(conn, ttl),
        control=RedisControlChannel(conn),
        approvals=RedisPendingApprovals(conn),
        name=redacted(url),
        sweep_interval=owner_loss_timeout - ttl,
        shared=True,
        ping=conn.ping,
        aclose=conn.aclose,
        idempotency=RedisIdempotencyKeys(conn),
        tasks=RedisTaskIndex(conn),
    )
