"""Frame ids for the Omni SSE dialect, so a dropped ``/v1/runs`` stream resumes.

A dialect frame is a projection of one hub event (a message, an approval
request, the task's end): one event gives zero or more frames. A frame's id
names its place in the run::

    <session id>/<run start>/<seq>.<index>

``run start`` is the hub event id of the run's first event, ``seq`` the hub
sequence number of the event the frame comes from and ``index`` its place among
that event's frames. Given such an id (the ``Last-Event-ID`` of a reconnect),
the server replays the run from its start through a fresh projection, which
yields the same frames in the same order, and sends only those after the id.
Clients treat the id as opaque.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from omni_grpc.runtime.interface import format_event_id, parse_event_id

_FRAME_ID = re.compile(r"^([A-Za-z0-9_-]{1,128})/([^/\s]+)/(\d{1,18})\.(\d{1,9})$")


@dataclass(frozen=True, order=True)
class Position:
    """Where a frame is in its run: ordered as the frames are sent."""

    seq: int
    index: int


@dataclass(frozen=True)
class FrameId:
    session_id: str
    run_start: str
    position: Position

    def __str__(self) -> str:
        return f"{self.session_id}/{self.run_start}/{self.position.seq}.{self.position.index}"

    def replay_from(self) -> str:
        """The hub event id to attach after to see the run from its first event."""
        parsed = parse_event_id(self.run_start)
        assert parsed is not None  # parse_frame_id checked it
        epoch, seq = parsed
        return format_event_id(epoch, seq - 1)


def parse_frame_id(text: str) -> FrameId | None:
    """The id of a dialect frame; None when ``text`` is not one."""
    match = _FRAME_ID.match(text.strip())
    if match is None:
        return None
    session_id, run_start, seq, index = match.groups()
    parsed = parse_event_id(run_start)
    if parsed is None or parsed[1] < 1:
        return None
    return FrameId(session_id, run_start, Position(int(seq), int(index)))


def run_id_for(session_id: str, run_start: str) -> str:
    """``done.run_id``: the same on every replay of the run, unique per run."""
    digest = hashlib.sha256(f"{session_id}/{run_start}".encode()).hexdigest()
    return f"run_{digest[:16]}"
