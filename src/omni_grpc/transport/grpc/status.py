"""Hub errors as gRPC statuses with ``google.rpc.Status`` details.

The details (``runtime.errors.details_of``) let clients in any language act
on the reason without parsing the message.
"""

from __future__ import annotations

from typing import NoReturn

import grpc
from google.protobuf import any_pb2
from google.protobuf.message import Message
from google.rpc import status_pb2
from grpc_status import rpc_status

from omni_grpc.runtime.errors import HubError, details_of, status_of


def _packed(detail: Message) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(detail)
    return packed


def status_for(error: HubError) -> status_pb2.Status:
    """The status from the one table (``runtime.errors.STATUSES``), with the
    details that let a client act on it."""
    return status_pb2.Status(
        code=status_of(error).grpc,
        message=str(error),
        details=[_packed(detail) for detail in details_of(error)],
    )


async def abort_with(context: grpc.aio.ServicerContext, error: HubError) -> NoReturn:
    await context.abort_with_status(rpc_status.to_status(status_for(error)))
    raise AssertionError("abort_with_status returned")  # pragma: no cover
