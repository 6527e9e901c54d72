"""Run and Attach responses, encoded once per event for every subscriber.

A ``RunResponse`` and an ``AttachResponse`` have the same fields (event_id 1,
message 2 | event 3, session_id 4, json 5), and for one event of one session
they are the same for every subscriber. So the response is written straight
from the event's wire bytes (encoded with its JSON text when the event was
made, ``runtime/bodies.py``), once per event, and each stream sends those
bytes: no message copied into a response, no response serialized per
subscriber. :func:`add_to_server` registers the service so that grpc sends
such bytes as they are (a response message is still serialized as usual).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import grpc

from omni_grpc.runtime.interface import HubEvent
from omni_grpc_proto.omni.v1 import agent_service_pb2_grpc

# The methods that stream events (their responses may be prebuilt bytes).
_STREAMS = ("Run", "Attach")


def _varint(value: int) -> bytes:
    if value < 0x80:
        return _BYTE[value]
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_BYTE = [bytes((n,)) for n in range(0x80)]
# The tags of the length-delimited fields 1 to 5 (number << 3 | 2).
_EVENT_ID, _MESSAGE, _EVENT, _SESSION_ID, _JSON = (bytes((n << 3 | 2,)) for n in range(1, 6))


def _encode(event: HubEvent, session_id: str, with_json: bool) -> bytes:
    event_id = event.event_id.encode()
    wire = event.wire
    session = session_id.encode()
    parts = [
        _EVENT_ID, _varint(len(event_id)), event_id,
        # Written even when empty: its presence sets the oneof.
        _MESSAGE if event.body.is_message else _EVENT, _varint(len(wire)), wire,
        _SESSION_ID, _varint(len(session)), session,
    ]  # fmt: skip
    if with_json:
        # The hub encoded the event once for the trace and SSE: the same bytes.
        data = event.data
        parts += (_JSON, _varint(len(data)), data)
    return b"".join(parts)


def response_bytes(event: HubEvent, session_id: str, *, with_json: bool = False) -> bytes:
    """The event's Run/Attach response as sent, built for its first subscriber."""
    return event.memo(
        ("grpc-response", session_id, with_json), lambda: _encode(event, session_id, with_json)
    )


def _passing(serialize: Callable[[Any], bytes]) -> Callable[[Any], bytes]:
    def serializer(response: Any) -> bytes:
        if type(response) is bytes:
            return response
        return serialize(response)

    return serializer


class _Registrar:
    """What the generated registration calls on a server: the service's table,
    passed on with the streaming methods' serializers accepting prebuilt bytes."""

    def __init__(self, server: Any) -> None:
        self._server = server
        self._generic: list[Any] = []
        self.registered = False

    def add_generic_rpc_handlers(self, handlers: Any) -> None:
        # Built again from the table below (it is the same table); kept in
        # case a generator calls only this.
        self._generic.extend(handlers)

    def add_registered_method_handlers(
        self, service: str, handlers: Mapping[str, grpc.RpcMethodHandler]
    ) -> None:
        table = dict(handlers)
        for name in _STREAMS:
            handler = table[name]
            table[name] = grpc.unary_stream_rpc_method_handler(
                handler.unary_stream,
                request_deserializer=handler.request_deserializer,
                response_serializer=_passing(handler.response_serializer),
            )
        self._server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(service, table),)
        )
        self._server.add_registered_method_handlers(service, table)
        self.registered = True

    def finish(self) -> None:
        if not self.registered:
            raise RuntimeError("the generated registration changed: AgentService was not added")


def add_to_server(servicer: agent_service_pb2_grpc.AgentServiceServicer, server: Any) -> None:
    """``add_AgentServiceServicer_to_server``, Run and Attach sending prebuilt bytes."""
    registrar = _Registrar(server)
    agent_service_pb2_grpc.add_AgentServiceServicer_to_server(servicer, registrar)
    registrar.finish()
