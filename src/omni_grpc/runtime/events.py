"""What the hub hands to transports: one event with its id and its JSON bytes.

An event is encoded once, when it is created: its protobuf wire bytes and its
JSON text (``runtime/bodies.py``, one native call for both where the native
codec is built). The text is shared by every transport, so gRPC, SSE and the
trace agree byte for byte; the wire bytes are what gRPC and a shared log send.

An event kept for replay holds that JSON text only (``HubEvent.stored``): a
decoded protobuf beside it took more memory than the text itself, so a
window counted in JSON units held up to ~1.6x its cap. A replayed event is
decoded from the text on first use, once (``HubEvent`` keeps what it decoded,
and what a transport built from it, for every subscriber it is handed to).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from omni_grpc.convert import parse_message, parse_server_event

# The id format is the ground floor's (clients read ids too); re-exported here.
from omni_grpc.event_ids import format_event_id as format_event_id
from omni_grpc.event_ids import parse_event_id as parse_event_id
from omni_grpc.runtime.health import RunFailure
from omni_grpc.vocabulary import AbortKind
from omni_grpc_proto.omni.v1 import agent_service_pb2, omni_pb2

_T = TypeVar("_T")


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
    # Set when the decoded object was dropped to save memory: which one ``data``
    # holds (``HubEvent.message`` and ``server_event`` decode it on first use).
    encoded: Literal["message", "server_event"] | None = None
    # The message's or server event's protobuf wire bytes, when the body was
    # made from them (not kept for replay: the text is).
    wire: bytes | None = None
    # ``size``, counted on first use (-1 until then), or given by a log that
    # stored it beside the text: the back-pressure and the window read it
    # several times per event.
    counted: int = field(default=-1, compare=False, repr=False)
    # A message body's payload arm, when its maker knew it and did not keep
    # the message (``payload_arm`` need not decode a large one to tell).
    arm: str | None = None
    # The message's record number: its place in the session's trace (the
    # ordinal of its line, ``session_meta`` being 1), given when the trace
    # took it. The log stores it beside ``data`` and refuses one that does not
    # follow its last (``EventLog.publish``): the trace and the log are one
    # journal, and after a fault what the log lacks is the trace's records
    # past its last number. None: not a record (partials, server events, a
    # child session's messages), or an event of a log written by 0.3.
    record: int | None = None

    @property
    def is_message(self) -> bool:
        return self.message is not None or self.encoded == "message"

    def stored(self) -> EventBody:
        """This body as a replay window keeps it: the JSON text, not the objects."""
        if self.encoded is not None:
            return self
        encoded: Literal["message", "server_event"] = (
            "message" if self.message is not None else "server_event"
        )
        return EventBody(
            None,
            None,
            self.data,
            self.failure,
            self.abort_kind,
            encoded,
            counted=self.counted,
            arm=self.payload_arm,
            record=self.record,
        )

    @property
    def payload_arm(self) -> str | None:
        """The message's payload arm (``""`` for none); None for a server event."""
        if self.message is not None:
            return self.message.WhichOneof("payload") or ""
        if self.encoded != "message":
            return None
        if self.arm is not None:
            return self.arm
        decoded = self.decoded_message
        return (decoded.WhichOneof("payload") or "") if decoded is not None else None

    @property
    def decoded_message(self) -> omni_pb2.OmniMessage | None:
        if self.encoded == "message":
            if self.wire is not None:  # exact, and several times faster than the text
                return omni_pb2.OmniMessage.FromString(self.wire)
            return parse_message(self.data, max_bytes=len(self.data))
        return self.message

    @property
    def decoded_server_event(self) -> agent_service_pb2.ServerEvent | None:
        if self.encoded == "server_event":
            if self.wire is not None:
                return agent_service_pb2.ServerEvent.FromString(self.wire)
            return parse_server_event(self.data)
        return self.server_event

    @property
    def size(self) -> int:
        """The size the reference counts: UTF-16 code units of the JSON text."""
        counted = self.counted
        if counted < 0:
            counted = utf16_length(self.data)
            object.__setattr__(self, "counted", counted)
        return counted


@dataclass(frozen=True, slots=True)
class HubEvent:
    """An event with its place in the session's sequence."""

    seq: int
    event_id: str
    body: EventBody
    # False for unicast events (sent to one subscriber, never replayed).
    buffered: bool
    # For a kept event: the seq of the kept event before it (0 for the first
    # of its epoch), so a reader can tell that it follows on from the last one
    # it delivered; None where the backend did not record it.
    prev: int | None = None
    # What was decoded from, or built for transports out of, this event: shared
    # by every subscriber it is handed to (see ``memo``).
    _memo: dict[Any, Any] = field(default_factory=dict, compare=False, repr=False)

    def stored(self) -> HubEvent:
        """The event as a replay window keeps it (see the module docstring)."""
        body = self.body.stored()
        if body is self.body:
            return self
        return HubEvent(self.seq, self.event_id, body, self.buffered, self.prev)

    def replayed(self) -> HubEvent:
        """A kept event handed out again: a copy of its own, so what it decodes
        is shared by this replay's subscribers and not kept in the window."""
        return HubEvent(self.seq, self.event_id, self.body, self.buffered, self.prev)

    def memo(self, key: object, make: Callable[[], _T]) -> _T:
        """``make()``, once per event and ``key``: an encoding a transport sends
        to every subscriber is built for the first one only."""
        try:
            value: _T = self._memo[key]
        except KeyError:
            value = self._memo[key] = make()
        return value

    @property
    def message(self) -> omni_pb2.OmniMessage | None:
        """The message (for a stored event, decoded on first use)."""
        body = self.body
        if body.encoded != "message":
            return body.message
        return self.memo("message", lambda: body.decoded_message)

    @property
    def server_event(self) -> agent_service_pb2.ServerEvent | None:
        body = self.body
        if body.encoded != "server_event":
            return body.server_event
        return self.memo("server_event", lambda: body.decoded_server_event)

    @property
    def wire(self) -> bytes:
        """The message's or server event's protobuf bytes."""
        body = self.body
        if body.wire is not None:
            return body.wire
        return self.memo("wire", lambda: _serialized(self))

    @property
    def data(self) -> bytes:
        return self.body.data

    @property
    def failure(self) -> RunFailure | None:
        return self.body.failure

    @property
    def abort_kind(self) -> AbortKind | None:
        return self.body.abort_kind


def _serialized(event: HubEvent) -> bytes:
    proto = event.message if event.body.is_message else event.server_event
    assert proto is not None
    return proto.SerializeToString()


def utf16_length(data: bytes) -> int:
    """Length of UTF-8 ``data`` in UTF-16 code units (JavaScript's ``.length``)."""
    if data.isascii():
        return len(data)
    text = data.decode("utf-8", errors="surrogatepass")
    return len(text) + sum(1 for ch in text if ord(ch) > 0xFFFF)
