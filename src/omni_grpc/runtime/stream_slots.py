"""The per-session stream limit (``--max-streams-per-session``), on this replica.

A subscribe awaits the log, so counting only the subscriptions already open
would let a burst of concurrent streams all pass the same check; the ones
still being opened count too.
"""

from __future__ import annotations

from collections.abc import Awaitable

from omni_grpc.runtime.errors import TooManyStreams
from omni_grpc.runtime.event_log import EventLogs, Subscription
from omni_grpc.runtime.limits import Limits


class StreamSlots:
    def __init__(self, logs: EventLogs, limits: Limits) -> None:
        self._logs = logs
        self._limits = limits
        # Per session: subscriptions being opened (not yet in subscriber_count).
        self._opening: dict[str, int] = {}

    def check(self, session_id: str) -> None:
        """Refuses a stream past the limit (TooManyStreams)."""
        limit = self._limits.max_streams_per_session
        opening = self._opening.get(session_id, 0)
        if self._logs.get(session_id).subscriber_count + opening >= limit:
            raise TooManyStreams(session_id, limit)

    async def open(self, session_id: str, subscribing: Awaitable[Subscription]) -> Subscription:
        """Awaits a subscribe that passed ``check``, counting it as open meanwhile."""
        self._opening[session_id] = self._opening.get(session_id, 0) + 1
        try:
            return await subscribing
        finally:
            left = self._opening.pop(session_id) - 1
            if left:
                self._opening[session_id] = left
