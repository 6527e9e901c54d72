"""What an engine knows of a session's past: read from its trace at each run.

Runs of one session land on any replica, and a replica may restart between
them, so a counter an engine keeps in its own memory is one replica's view:
the next run elsewhere starts it again (two calls ``call_demo_2`` in one
session, a second ``tool_list_ready``, token totals that go back). The
session's shared state is its trace (one shared volume, written only by the
lease holder, each record before anyone sees it), so everything an engine
derives from the past (ids, counters, totals, where a cycle stands) is read
from it when the run starts. ``RunOptions.trace`` is that trace; the run's
own input is its last records by then, and is not the past.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from omni_grpc.convert import ConversionError, message_from_dict
from omni_grpc.engines.base import JsonObject, RunOptions
from omni_grpc.trace.window import UnitScan

# Payloads that open a tool call (their id names the call).
_CALLS = frozenset({"tool_call", "partial_tool_call"})


@dataclass(frozen=True)
class SessionPast:
    # Units before this run's input, as the reference client counts tasks.
    tasks: int
    # Every tool_call_id a call of the session used.
    call_ids: frozenset[str]
    # A tool_list_ready is recorded (the tools were announced).
    tools_listed: bool
    # The last token_usage's session totals, None before the first.
    session_usage: Mapping[str, int] | None

    def next_number(self, prefix: str) -> int:
        """One past the highest ``<prefix><n>`` among the call ids (1 for none)."""
        pattern = re.compile(re.escape(prefix) + r"(\d+)")
        numbers = (int(m.group(1)) for i in self.call_ids if (m := pattern.fullmatch(i)))
        return max(numbers, default=0) + 1


EMPTY = SessionPast(0, frozenset(), False, None)


def session_past(options: RunOptions, input_count: int) -> SessionPast:
    """The session's past before this run (``input_count``: its input messages,
    recorded last, left out). Read one record at a time: a long session's
    history is folded, not held."""
    if options.trace is None:
        return EMPTY
    return past_of(options.trace.iter_messages(skip_last=input_count))


def past_of(messages: Iterable[JsonObject]) -> SessionPast:
    scan = UnitScan()
    tasks = 0
    ids: set[str] = set()
    listed = False
    usage: Mapping[str, int] | None = None
    for message in messages:
        payload: Mapping[str, Any] = message.get("payload") or {}
        kind = payload.get("type")
        if message.get("origin"):
            continue  # a child session's: its own id space, never the parent's
        if kind in _CALLS and isinstance(payload.get("tool_call_id"), str):
            ids.add(payload["tool_call_id"])
        elif kind == "tool_list_ready":
            listed = True
        elif kind == "token_usage" and isinstance(payload.get("session"), Mapping):
            usage = payload["session"]
        try:
            tasks += scan.feed(message_from_dict(message))
        except ConversionError:
            continue  # the trace reader already refused what it could not read
    return SessionPast(tasks, frozenset(ids), listed, usage)
