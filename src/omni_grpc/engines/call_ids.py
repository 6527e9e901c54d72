"""Tool call ids unique within a session, across tasks and restarts.

A resumed trace (``trace/resume.py``, the reference ``resumeTrace``) pairs each
``tool_call_output`` with the committed call of its id, so a session that uses
one id twice loses an output on resume. Engines that invent ids make them
unique themselves (the demo counts on from its trace). Engines that pass ids
through from elsewhere (a recording, a child program, an upstream server, a
model provider) cannot trust them to be, and rename here: the first use of an
id keeps it, a later use in the same session gets ``<id>_<8 hex>``, and every
message of that call follows. Ids the session used before a restart are
learnt from its trace.
"""

from __future__ import annotations

import secrets
from pathlib import Path

from omni_grpc.engines.base import RunOptions
from omni_grpc.trace import read_jsonl
from omni_grpc_proto.omni.v1 import omni_pb2

# Payloads that open a call (the first one seen decides its name).
_CALLS = frozenset({"tool_call", "partial_tool_call"})


def fresh_id(taken: str) -> str:
    return f"{taken}_{secrets.token_hex(4)}"


def recorded_call_ids(trace: Path | None) -> set[str]:
    """Every ``tool_call_id`` the trace's calls use (none for a missing trace)."""
    if trace is None or not trace.is_file():
        return set()
    return {
        record.message.tool_call.tool_call_id
        for record in read_jsonl(trace, tolerant=True)
        if record.message.WhichOneof("payload") == "tool_call"
    }


class CallIdRegistry:
    """The ids each session has used; one per engine instance."""

    def __init__(self) -> None:
        self._used: dict[str, set[str]] = {}

    def for_run(self, options: RunOptions) -> RunCallIds:
        used = self._used.get(options.session_id)
        if used is None:
            used = self._used[options.session_id] = recorded_call_ids(options.trace_path)
        return RunCallIds(used)


class RunCallIds:
    """One run's renaming: the source's ids to the session's, and back."""

    def __init__(self, used: set[str]) -> None:
        self._used = used
        self._ours: dict[str, str] = {}  # the source's id -> the one recorded
        self._theirs: dict[str, str] = {}

    def incoming(self, message: omni_pb2.OmniMessage) -> omni_pb2.OmniMessage:
        """``message`` with its tool_call_id as the session records it.

        Messages of a child session (with an origin) keep theirs: the child is
        its own id space, and they are not recorded in this session's trace.
        """
        arm = message.WhichOneof("payload")
        if arm is None or message.origin:
            return message
        body = getattr(message, arm)
        source_id = getattr(body, "tool_call_id", None)
        if not isinstance(source_id, str):
            return message
        ours = self._ours.get(source_id)
        if ours is None:
            if arm not in _CALLS:
                return message  # not a call of this run: leave it for the checks downstream
            ours = fresh_id(source_id) if source_id in self._used else source_id
            self._ours[source_id] = ours
            self._theirs[ours] = source_id
            self._used.add(ours)
        if ours == source_id:
            return message
        renamed = omni_pb2.OmniMessage()
        renamed.CopyFrom(message)
        getattr(renamed, arm).tool_call_id = ours
        return renamed

    def theirs(self, tool_call_id: str) -> str:
        """The source's id for one the session records (for answers sent back)."""
        return self._theirs.get(tool_call_id, tool_call_id)
