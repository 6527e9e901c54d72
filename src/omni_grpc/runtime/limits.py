"""What an operator lets one replica hold at once (``serve --max-*``).

Each limit bounds memory or fan-out that a client could otherwise grow
without end: sessions (index records, and a replay window each while in use),
concurrent runs (an engine task and a busy window each), how busy the event
loop may be before new runs are refused (a saturated replica takes gRPC calls
too slowly to tell them anything), streams per session
(every event is sent to each of them) and the time a run may wait for an
approval (a run parked forever holds its slot forever). Past a count limit the
request is refused before anything is created or recorded (``LimitExceeded``:
gRPC ``RESOURCE_EXHAUSTED``, HTTP 429); deleting sessions (``DeleteSession``,
or ``session_ttl`` for idle ones) makes room again. An ask that waits longer
than ``approval_wait`` is not run (no decision is recorded, its output says
the wait expired): the run goes on instead of being aborted.

Runs and streams are counted by the replica that serves them; sessions are
counted in the session index, which every replica shares, so the session
limit holds for the whole deployment.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# A replica running fewer runs than this is never refused for being busy: its
# loop is then busy with something else (a message of many MiB, say), which
# one run fewer would not relieve.
OVERLOAD_MIN_RUNS = 16


@dataclass(frozen=True)
class Limits:
    # Sessions the index may hold; sessions found on disk at startup are always
    # indexed, new ones are refused once the index holds this many.
    max_sessions: int = 10_000
    # Runs this replica executes at once.
    max_runs: int = 512
    # Percent of the last second the event loop may be busy (``loop_load``)
    # while OVERLOAD_MIN_RUNS or more runs go on, before new runs are refused
    # (``Overloaded``); 0: never.
    max_loop_busy: int = 90
    # Open streams (Run, Attach, SSE) per session on this replica.
    max_streams_per_session: int = 128
    # Seconds a tool call waits for Approve before it is denied.
    approval_wait: float = 3600.0
    # Seconds a session may stay idle before it is deleted (inf: kept until
    # deleted), and whether its trace and workspace go with it.
    session_ttl: float = math.inf
    delete_expired_traces: bool = False

    def __post_init__(self) -> None:
        for name in ("max_sessions", "max_runs", "max_streams_per_session"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        if not 0 <= self.max_loop_busy <= 100:
            raise ValueError("max_loop_busy must be a percentage (0: no limit)")
        if not (self.approval_wait > 0 and math.isfinite(self.approval_wait)):
            raise ValueError("approval_wait must be a finite number of seconds > 0")
        if not self.session_ttl > 0:
            raise ValueError("session_ttl must be a number of seconds > 0")
