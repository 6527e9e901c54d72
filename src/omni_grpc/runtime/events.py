"""What the hub hands to transports: one event with its id and its JSON bytes.

The JSON text is produced once by the codec when the event is created and
shared by every transport, so gRPC, SSE and the trace agree byte for byte.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from omni_grpc.runtime.health import RunFailure
from omni_grpc.vocabulary import AbortKind
from omni_grpc_proto.omni.v1 import agent_service_pb2, omni_pb2

_EVENT_ID = re.compile(r"^(.*)-(\d+)$")


@dataclass(frozen=True, slots=True)
class EventBody:
    """An event before the log gives it an id: exactly one of message/server_event."""

    message: omni_pb2.OmniMessage | None
    server_event: agent_service_pb2.ServerEvent | None
    # Compact reference JSON (no newline), from omni_grpc.convert.
    data: bytes
    # On the ``task_state idle`` that closes a run the server had to stop (its
    # trace could not be written): why, for the run's client. Not on the wire
    # of the reference stream, whose task_state has no such field.
    failure: RunFailure | None = None
    # On an ``abort`` message: who or what ended the run. The message itself
    # has only a free-text reason (the reference schema), so a log that stores
    # events elsewhere must store this beside ``data``.
    abort_kind: AbortKind | None = None

    @property
    def size(self) -> int:
        """The size the reference counts: UTF-16 code units of the JSON text."""
        return utf16_length(self.data)


@dataclass(frozen=True, slots=True)
class HubEvent:
    """An event with its place in the session's sequence."""

    seq: int
    event_id: str
    body: EventBody
    # False for unicast events (sent to one subscriber, never replayed).
    buffered: bool

    @property
    def message(self) -> omni_pb2.OmniMessage | None:
        return self.body.message

    @property
    def server_event(self) -> agent_service_pb2.ServerEvent | None:
        return self.body.server_event

    @property
    def data(self) -> bytes:
        return self.body.data

    @property
    def failure(self) -> RunFailure | None:
        return self.body.failure

    @property
    def abort_kind(self) -> AbortKind | None:
        return self.body.abort_kind


def utf16_length(data: bytes) -> int:
    """Length of UTF-8 ``data`` in UTF-16 code units (JavaScript's ``.length``)."""
    if data.isascii():
        return len(data)
    text = data.decode("utf-8", errors="surrogatepass")
    return len(text) + sum(1 for ch in text if ord(ch) > 0xFFFF)


def format_event_id(epoch: str, seq: int) -> str:
    return f"{epoch}-{seq}"


def parse_event_id(event_id: str) -> tuple[str, int] | None:
    """Splits ``<epoch>-<seq>`` at the last dash; None when malformed."""
    match = _EVENT_ID.match(event_id)
    if match is None:
        return None
    return match.group(1), int(match.group(2))
