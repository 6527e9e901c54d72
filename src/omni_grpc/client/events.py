"""What the client yields: one typed event per RunResponse / AttachResponse."""

from __future__ import annotations

from dataclasses import dataclass

from omni_grpc_proto.omni.v1 import agent_service_pb2 as pb
from omni_grpc_proto.omni.v1 import omni_pb2


@dataclass(frozen=True, slots=True)
class StreamEvent:
    event_id: str
    session_id: str
    message: omni_pb2.OmniMessage | None = None
    server_event: pb.ServerEvent | None = None
    # The server's exact reference JSON of the event, when the call asked for
    # it (include_json); empty otherwise.
    json: str = ""
    # The message's (or server event's) protobuf bytes exactly as the server
    # sent them (``from_bytes``): a relay passes them on without serializing
    # the message again. None when the response was decoded whole.
    wire: bytes | None = None

    @classmethod
    def from_response(cls, response: pb.RunResponse | pb.AttachResponse) -> StreamEvent:
        kind = response.WhichOneof("kind")
        return cls(
            event_id=response.event_id,
            session_id=response.session_id,
            message=response.message if kind == "message" else None,
            server_event=response.event if kind == "event" else None,
            json=response.json,
        )

    @classmethod
    def from_bytes(cls, data: bytes) -> StreamEvent:
        """A RunResponse's or AttachResponse's bytes (the two have the same
        fields): the envelope read here, the message or server event parsed
        from its own bytes, which the event keeps (``wire``). Anything but the
        plain form (a field twice, a wire type the schema does not give these
        fields) is decoded whole by protobuf, as ``from_response``."""
        fields = _envelope(data)
        if fields is None:
            return cls.from_response(pb.RunResponse.FromString(data))
        event_id, message, server_event, session_id, json = fields
        try:
            return cls(
                event_id=event_id.decode(),
                session_id=session_id.decode(),
                message=None if message is None else omni_pb2.OmniMessage.FromString(message),
                server_event=(
                    None if server_event is None else pb.ServerEvent.FromString(server_event)
                ),
                json=json.decode(),
                wire=message if message is not None else server_event,
            )
        except UnicodeDecodeError:  # protobuf's own error for it, as a whole decode gives
            return cls.from_response(pb.RunResponse.FromString(data))

    @property
    def kind(self) -> str:
        """The payload kind (``text``, ``partial_text``...) or the server event type
        prefixed with ``@`` (``@task_state``, ``@approval_request``...)."""
        if self.message is not None:
            return self.message.WhichOneof("payload") or ""
        if self.server_event is not None:
            return "@" + (self.server_event.WhichOneof("kind") or "")
        return ""

    @property
    def is_task_end(self) -> bool:
        ev = self.server_event
        return (
            ev is not None
            and ev.WhichOneof("kind") == "task_state"
            and ev.task_state.state == pb.SESSION_STATE_IDLE
        )

    def to_json(self) -> bytes:
        """The event's reference JSON (the bytes SSE carries)."""
        # The codec is imported here, when first needed: `omni-grpc abort` and
        # `approve` never print an event and should not pay for loading it.
        from omni_grpc.convert import serialize_message, serialize_server_event

        if self.message is not None:
            return serialize_message(self.message)
        if self.server_event is not None:
            return serialize_server_event(self.server_event)
        return b"{}"


_EMPTY = b""
# RunResponse / AttachResponse: event_id 1, message 2 | event 3, session_id 4,
# json 5, each length-delimited (wire type 2): their tags.
_TAGS = {0x0A: 0, 0x12: 1, 0x1A: 2, 0x22: 3, 0x2A: 4}


def _envelope(
    data: bytes,
) -> tuple[bytes, bytes | None, bytes | None, bytes, bytes] | None:
    """The five fields' bytes (message / event None when absent); None when
    the response is not in the plain form (see ``StreamEvent.from_bytes``)."""
    found: list[bytes | None] = [None, None, None, None, None]
    pos, end = 0, len(data)
    while pos < end:
        index = _TAGS.get(data[pos])
        if index is None or found[index] is not None or pos + 1 >= end:
            return None
        length = data[pos + 1]
        pos += 2
        if length >= 0x80:  # a length of more than one byte (a varint)
            length &= 0x7F
            shift = 7
            while True:
                if pos >= end or shift > 28:
                    return None
                byte = data[pos]
                pos += 1
                length |= (byte & 0x7F) << shift
                if byte < 0x80:
                    break
                shift += 7
        after = pos + length
        if after > end:
            return None
        found[index] = data[pos:after]
        pos = after
    event_id, message, event, session_id, json = found
    if message is not None and event is not None:
        return None  # a oneof set twice: protobuf's rule (the last wins) applies
    return (event_id or _EMPTY, message, event, session_id or _EMPTY, json or _EMPTY)
