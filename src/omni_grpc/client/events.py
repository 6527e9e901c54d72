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
