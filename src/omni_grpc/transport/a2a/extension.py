"""The lossless extension: every OmniMessage of a task, exactly as the trace holds it.

A client that lists ``URI`` in its ``A2A-Extensions`` header (or gRPC metadata)
gets, beside the ordinary mapping, one more artifact on the task
(``ARTIFACT_ID``): a chunk per OmniMessage, each a data part
``{"eventId": ..., "json": ...}`` whose ``json`` is the message's reference JSON
text, the very bytes the trace and the SSE stream carry (a JSON string, since a
structured value would lose key order and number spelling). ``eventId`` is the
hub's id for the event, which ``Attach`` and the SSE routes resume after.
"""

from __future__ import annotations

from a2a.types import a2a_pb2 as a2a
from google.protobuf import struct_pb2

URI = "urn:omni-grpc:a2a:omni-messages:v1"
ARTIFACT_ID = "omni-messages"
MEDIA_TYPE = "application/vnd.omni-message+json"
DESCRIPTION = (
    "Carries each OmniMessage of a task as its exact reference JSON (a data part "
    '{"eventId", "json"}) in the artifact "omni-messages", byte for byte as the trace holds it.'
)


def message_part(event_id: str, data: bytes) -> a2a.Part:
    value = struct_pb2.Value()
    value.struct_value.update({"eventId": event_id, "json": data.decode("utf-8")})
    return a2a.Part(data=value, media_type=MEDIA_TYPE)


def card_entry() -> a2a.AgentExtension:
    return a2a.AgentExtension(uri=URI, description=DESCRIPTION, required=False)
