"""The live tail of ``GET /messages``: what a client loading history mid-run
needs to paint the fragments still in progress (the reference's ``live``).

``fold_live_tail`` builds it from logged events alone (the task's events, in
log order), so any process that can read a session's log can answer, not only
the one running the task.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from omni_grpc.convert import message_from_dict
from omni_grpc.protocol.streaming import live_fragments
from omni_grpc.runtime.events import HubEvent
from omni_grpc_proto.omni.v1 import omni_pb2


@dataclass(frozen=True)
class LiveTail:
    # Buffered partials up to this event id are already in the fragments.
    cursor: str
    # Synthetic partial_* start messages carrying each open fragment's prefix.
    fragments: list[omni_pb2.OmniMessage]


def fold_live_tail(events: Iterable[HubEvent]) -> LiveTail | None:
    """The live tail after ``events``: one running task's events from its start
    (its first input message or its ``task_state running``) up to now. The
    cursor is the last event's id; None when there are no events."""
    messages: list[omni_pb2.OmniMessage] = []
    cursor: str | None = None
    for event in events:
        cursor = event.event_id
        message = event.message  # decoded on each access for a kept event
        if message is not None:
            messages.append(message)
    if cursor is None:
        return None
    return LiveTail(cursor, [message_from_dict(f) for f in live_fragments(messages)])
