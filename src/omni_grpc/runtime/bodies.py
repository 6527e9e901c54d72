"""Event bodies the hub publishes, each encoded once through the codec: its
wire bytes and its JSON text, the one from the other (``encode_message``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from omni_grpc.convert import encode_message, encode_message_dict, serialize_server_event
from omni_grpc.runtime.events import EventBody, HubEvent
from omni_grpc.runtime.health import RunFailure
from omni_grpc.vocabulary import AbortKind, SessionState
from omni_grpc_proto.omni.v1 import agent_service_pb2, omni_pb2

_STATES = {
    SessionState.IDLE: agent_service_pb2.SESSION_STATE_IDLE,
    SessionState.RUNNING: agent_service_pb2.SESSION_STATE_RUNNING,
    SessionState.COMPACTING: agent_service_pb2.SESSION_STATE_COMPACTING,
}


def kept(data: bytes) -> bytes:
    """``data`` in a bytes object of its own size. orjson hands back its output
    in the buffer it wrote into (4 KiB at least), so a 170-byte delta kept in
    a replay window held 4 KiB: a full window of small events took about 50 MiB
    under an 8 MB cap. The copy costs far less than the serializing did."""
    return memoryview(data).tobytes()


# Wire bytes past which a published body does not keep its decoded message.
# A large message is sent as its wire bytes (gRPC) or its text (SSE); the
# object beside them was one more copy of it, held for as long as any reader
# was still sending it. A reader that needs the object (the dialect, A2A)
# decodes it from the wire bytes, once per event (``HubEvent.message``).
# Small ones keep it: decoding each again would cost more than they weigh.
DECODED_UP_TO = 64 * 1024


def message_body(
    msg: omni_pb2.OmniMessage, abort_kind: AbortKind | None = None, wire: bytes | None = None
) -> EventBody:
    """``wire``: ``msg``'s wire bytes, when the caller has them."""
    wire, text = encode_message(msg, wire)
    return _body(msg, wire, text, abort_kind)


def engine_message(item: Mapping[str, Any]) -> tuple[omni_pb2.OmniMessage, EventBody]:
    """An engine's message dict, decoded once and encoded once: the message
    (the hub reads it while it records and publishes it) and the body every
    transport sends."""
    msg, wire, text = encode_message_dict(item)
    return msg, _body(msg, wire, text)


def _body(
    msg: omni_pb2.OmniMessage, wire: bytes, text: bytes, abort_kind: AbortKind | None = None
) -> EventBody:
    if len(wire) <= DECODED_UP_TO:
        return EventBody(msg, None, text, abort_kind=abort_kind, wire=wire)
    arm = msg.WhichOneof("payload") or ""
    return EventBody(None, None, text, abort_kind=abort_kind, encoded="message", wire=wire, arm=arm)


def with_abort_kind(body: EventBody, kind: AbortKind | None) -> EventBody:
    if kind is None:
        return body
    return replace(body, abort_kind=kind)


def server_event_body(event: agent_service_pb2.ServerEvent) -> EventBody:
    return EventBody(
        None, event, kept(serialize_server_event(event)), wire=event.SerializeToString()
    )


def task_state_body(
    state: SessionState, queued: int = 0, failure: RunFailure | None = None
) -> EventBody:
    # The reference always writes queued (0 without a queue).
    event = agent_service_pb2.ServerEvent(
        task_state=agent_service_pb2.TaskState(state=_STATES[state], queued=queued)
    )
    return EventBody(
        None, event, kept(serialize_server_event(event)), failure, wire=event.SerializeToString()
    )


def approval_request_body(tool_call: omni_pb2.OmniMessage, origin: Sequence[str] = ()) -> EventBody:
    request = agent_service_pb2.ApprovalRequest(tool_call=tool_call, origin=list(origin))
    return server_event_body(agent_service_pb2.ServerEvent(approval_request=request))


def resync_required_body() -> EventBody:
    event = agent_service_pb2.ServerEvent(resync_required=agent_service_pb2.ResyncRequired())
    return server_event_body(event)


def is_resync(event: HubEvent) -> bool:
    """True for a ``resync_required``: the stream was cut off behind the window."""
    if event.body.is_message:
        return False
    ev = event.server_event
    return ev is not None and ev.WhichOneof("kind") == "resync_required"


def is_task_end(event: HubEvent) -> bool:
    """True for the buffered ``task_state idle`` that closes a task."""
    if event.body.is_message:
        return False
    ev = event.server_event
    return (
        event.buffered
        and ev is not None
        and ev.WhichOneof("kind") == "task_state"
        and ev.task_state.state == agent_service_pb2.SESSION_STATE_IDLE
    )
