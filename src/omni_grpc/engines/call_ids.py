"""Tool call ids unique within a session, across tasks and restarts.

A resumed trace (``trace/resume.py``, the reference ``resumeTrace``) pairs each
``tool_call_output`` with the committed call of its id, so a session that uses
one id twice loses an output on resume. Engines that invent ids make them
unique themselves (the demo counts on from its trace). Engines that pass ids
through from elsewhere (a recording, a child program, an upstream server, a
model provider) cannot trust them to be, and rename here: the first use of an
id keeps it, a later use in the same session gets ``<id>_<8 hex>``, and every
message of that call follows. The ids the session used are learnt from its
trace at each run (``session_past``), whichever replica ran the earlier ones.
"""

from __future__ import annotations

import secrets

from omni_grpc.engines.base import RunOptions
from omni_grpc.engines.session_past import session_past
from omni_grpc_proto.omni.v1 import omni_pb2

# Payloads that open a call (the first one seen decides its name).
_CALLS = frozenset({"tool_call", "partial_tool_call"})


def fresh_id(taken: str) -> str:
    return f"{taken}_{secrets.token_hex(4)}"


class CallIdRegistry:
    """Hands each run the ids its session used, read from the session's trace
    at the run's start: the session's shared state, so a run on another
    replica (or after a restart) knows every id the earlier runs used."""

    def for_run(self, options: RunOptions) -> RunCallIds:
        return RunCallIds(set(session_past(options, 0).call_ids))


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
