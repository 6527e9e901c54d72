"""Run and Attach send responses encoded once per event for every subscriber.

``runtime.agent_service.response_bytes`` writes an event's response straight
from its wire bytes, once for all its subscribers; :func:`add_to_server`
registers the service so that grpc sends such bytes as they are (a response
message is still serialized as usual).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import grpc

from omni_grpc_proto.omni.v1 import agent_service_pb2_grpc

# The methods that stream events (their responses may be prebuilt bytes).
_STREAMS = ("Run", "Attach")


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
