"""Runtime guards mirroring the reference ``is*`` functions.

Each guard accepts a message either as a plain JSON dict (the builders' output)
or as an ``omni_pb2.OmniMessage``, so the same checks serve the builders, the
trace writer and the transports.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeAlias

from omni_grpc.protocol.streaming import PARTIAL_KINDS as PARTIAL_KINDS
from omni_grpc_proto.omni.v1 import omni_pb2

# A message as JSON (dict) or as protobuf.
AnyMessage: TypeAlias = Mapping[str, Any] | omni_pb2.OmniMessage

COMPLETE_MODEL_KINDS = frozenset(
    {
        "text",
        "image_url",
        "inline_data",
        "thinking",
        "inline_thinking",
        "tool_call",
        "tool_call_output",
    }
)
EVENT_KINDS = frozenset(
    {
        "approval_decision",
        "abort",
        "request_begin",
        "request_end",
        "token_usage",
        "compaction_begin",
        "compaction_end",
        "goal_finished",
        "subagent",
        "tool_list_ready",
        "mcp_connect_begin",
        "mcp_connect_end",
    }
)
KNOWN_KINDS = PARTIAL_KINDS | COMPLETE_MODEL_KINDS | EVENT_KINDS | {"session_meta"}


def payload_kind(msg: AnyMessage) -> str:
    """The payload ``type`` string (``"session_meta"`` for a meta), ``""`` if none."""
    if isinstance(msg, Mapping):
        if msg.get("type") == "session_meta":
            return "session_meta"
        payload = msg.get("payload")
        kind = payload.get("type") if isinstance(payload, Mapping) else None
        return kind if isinstance(kind, str) else ""
    arm = msg.WhichOneof("payload")
    if arm is None:
        return ""
    if arm == "unknown":
        return str(msg.unknown.type)
    return str(arm)


def envelope_type(msg: AnyMessage) -> str:
    """The envelope ``type`` (``session_meta``/``model_msg``/``event_msg``); a
    protobuf message has no such field: it follows from the payload arm."""
    if isinstance(msg, Mapping):
        value = msg.get("type")
        return value if isinstance(value, str) else ""
    if msg.WhichOneof("payload") == "unknown":
        return str(msg.unknown.envelope_type)
    kind = payload_kind(msg)
    if kind == "session_meta":
        return "session_meta"
    if kind in COMPLETE_MODEL_KINDS or kind in PARTIAL_KINDS:
        return "model_msg"
    if kind in EVENT_KINDS:
        return "event_msg"
    return ""


def has_origin(msg: AnyMessage) -> bool:
    if isinstance(msg, Mapping):
        return bool(msg.get("origin"))
    return len(msg.origin) > 0


def is_partial_kind(kind: str) -> bool:
    # An unknown future kind named partial_* is a fragment too: keep it out of traces.
    return kind in PARTIAL_KINDS or kind.startswith("partial_")


def is_partial_payload(payload_or_msg: AnyMessage) -> bool:
    """True for a ``partial_*`` payload, given the payload dict or a whole message."""
    if isinstance(payload_or_msg, Mapping) and "payload" not in payload_or_msg:
        kind = payload_or_msg.get("type")
        return isinstance(kind, str) and is_partial_kind(kind)
    return is_partial_kind(payload_kind(payload_or_msg))


def is_model_message(msg: AnyMessage) -> bool:
    return envelope_type(msg) == "model_msg"


def is_event_message(msg: AnyMessage) -> bool:
    return envelope_type(msg) == "event_msg"


def is_session_meta(msg: AnyMessage) -> bool:
    return envelope_type(msg) == "session_meta"


def is_complete_model_message(msg: AnyMessage) -> bool:
    return is_model_message(msg) and not is_partial_kind(payload_kind(msg))


def is_recordable(msg: AnyMessage) -> bool:
    """What a trace holds: session_meta, complete model_msg and event_msg, no origin."""
    if has_origin(msg):
        return False
    return not is_partial_kind(payload_kind(msg))
