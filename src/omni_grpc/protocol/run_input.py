"""What a client may hand a run as input, checked before anything is recorded.

Run input becomes trace lines and reaches the engine, so it must pass two
tests. The codec's: the message converts to one line of JSON whose keys agree
with its typed fields (a forged hint, an unknown payload that contradicts
itself, anything ``serialize_message`` refuses). And the protocol's: input is
the user's side of the conversation (no assistant-role text), its timestamp
is ISO-8601 when it has one, and a ``tool_call_output`` answers a tool call
the session really made.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from datetime import datetime

from omni_grpc.convert import ConversionError, serialize_message
from omni_grpc_proto.omni.v1 import omni_pb2

# The date-time forms of ISO-8601 a JavaScript Date reads back: a full date,
# a time to at least the minute, and a zone ("Z" or an offset).
_ISO_8601 = re.compile(
    r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}:\d{2})", re.ASCII
)
# The payloads whose role says who speaks; run input speaks for the user.
_ROLE_ARMS = ("text", "image_url", "inline_data", "tool_call_output")


class InputProblem(ValueError):
    """Run input the server must refuse; ``field`` names it (``input[1].payload.role``)."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


def is_iso_8601(text: str) -> bool:
    if _ISO_8601.fullmatch(text) is None:
        return False
    try:
        datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:  # 2026-13-45T...: the right shape, not a moment
        return False
    return True


def tool_calls_made(history: Iterable[omni_pb2.OmniMessage]) -> set[str]:
    """The ids of the tool calls a session's history holds."""
    return {
        msg.tool_call.tool_call_id for msg in history if msg.WhichOneof("payload") == "tool_call"
    }


def check_run_input(
    messages: Iterable[omni_pb2.OmniMessage], calls_made: Collection[str] = ()
) -> None:
    """Raises InputProblem for the first input message the server must refuse."""
    for index, msg in enumerate(messages):
        field = f"input[{index}]"
        try:
            serialize_message(msg)
        except ConversionError as exc:
            raise InputProblem(field + _dotted(exc.path), exc.reason) from None
        if msg.timestamp and not is_iso_8601(msg.timestamp):
            raise InputProblem(
                f"{field}.timestamp", "must be ISO-8601 UTC text like 2026-01-02T03:04:05.678Z"
            )
        arm = msg.WhichOneof("payload")
        if arm not in _ROLE_ARMS:
            continue  # which kinds are run input at all is the hub's rule
        payload = getattr(msg, arm)
        if payload.role != omni_pb2.ROLE_USER:
            raise InputProblem(f"{field}.payload.role", "run input speaks for the user: ROLE_USER")
        if arm == "tool_call_output" and payload.tool_call_id not in calls_made:
            raise InputProblem(
                f"{field}.payload.tool_call_id",
                f"answers no tool call this session made ({payload.tool_call_id!r})",
            )


def _dotted(pointer: str) -> str:
    """A JSON Pointer as the field path gRPC clients read (``/payload/x`` -> ``.payload.x``)."""
    if not pointer:
        return ""
    steps = [s.replace("~1", "/").replace("~0", "~") for s in pointer.split("/")[1:]]
    return "".join(f"[{s}]" if s.isdigit() else f".{s}" for s in steps)
