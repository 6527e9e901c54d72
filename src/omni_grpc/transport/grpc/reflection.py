"""Server reflection under both of its names.

grpcio-reflection serves only ``grpc.reflection.v1alpha``; tools that speak
only ``grpc.reflection.v1`` (``buf curl --reflect-protocol grpc-v1``, newer
grpcurl and Postman) then see no services. v1 is v1alpha renamed: the same
messages with the same field numbers, so one servicer answers both, and the
v1 file is added to the descriptor pool (derived from the v1alpha one) so a
client can also reflect on the reflection service itself. A reflection
stream lasts as long as its client keeps it open; it ends when the server
stops (closing.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Iterable
from typing import Any

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool
from grpc_reflection.v1alpha import reflection
from grpc_reflection.v1alpha import reflection_pb2 as v1alpha

from omni_grpc.transport.grpc.closing import Closing

V1ALPHA = reflection.SERVICE_NAME
V1 = "grpc.reflection.v1.ServerReflection"
_V1_FILE = "grpc/reflection/v1/reflection.proto"


def _v1_file(pool: descriptor_pool.DescriptorPool) -> None:
    """Adds ``grpc/reflection/v1/reflection.proto`` to ``pool`` unless it is there."""
    try:
        pool.FindFileByName(_V1_FILE)
        return
    except KeyError:
        pass
    proto = descriptor_pb2.FileDescriptorProto()
    v1alpha.DESCRIPTOR.CopyToProto(proto)
    old, new = f".{proto.package}.", ".grpc.reflection.v1."
    proto.name, proto.package = _V1_FILE, "grpc.reflection.v1"
    proto.options.Clear()
    for message in proto.message_type:
        for field in message.field:
            if field.type_name.startswith(old):
                field.type_name = new + field.type_name[len(old) :]
    for service in proto.service:
        for method in service.method:
            method.input_type = new + method.input_type[len(old) :]
            method.output_type = new + method.output_type[len(old) :]
    pool.Add(proto)


def enable_reflection(
    server: grpc.aio.Server, service_names: Iterable[str], closing: Closing
) -> None:
    """Serves reflection as v1 and v1alpha, listing ``service_names`` and both;
    its streams end when ``closing`` closes."""
    pool = descriptor_pool.Default()
    _v1_file(pool)
    servicer = reflection.aio.ReflectionServicer((*service_names, V1, V1ALPHA), pool=pool)

    async def info(requests: AsyncIterable[v1alpha.ServerReflectionRequest], context: Any) -> None:
        async def answer() -> None:
            async for response in servicer.ServerReflectionInfo(requests, context):
                await context.write(response)

        await closing.serve(answer(), context)

    for name in (V1, V1ALPHA):
        handler = grpc.stream_stream_rpc_method_handler(
            info,
            request_deserializer=v1alpha.ServerReflectionRequest.FromString,
            response_serializer=v1alpha.ServerReflectionResponse.SerializeToString,
        )
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(name, {"ServerReflectionInfo": handler}),)
        )
