"""Hub errors as gRPC statuses with ``google.rpc.Status`` details.

INVALID_ARGUMENT carries a ``BadRequest`` naming the field, NOT_FOUND a
``ResourceInfo``, FAILED_PRECONDITION a ``PreconditionFailure``, so clients in
any language can act on the reason without parsing the message.
"""

from __future__ import annotations

from typing import NoReturn

import grpc
from google.protobuf import any_pb2
from google.protobuf.message import Message
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from omni_grpc.runtime.errors import (
    ApprovalNotPending,
    HubError,
    InvalidRequest,
    LimitExceeded,
    ModeNotAllowed,
    SessionBusy,
    SessionNotFound,
    status_of,
)

ERROR_DOMAIN = "omni-grpc"


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
        details=[_packed(detail) for detail in _details(error)],
    )


def _details(error: HubError) -> list[Message]:
    if isinstance(error, InvalidRequest):
        violation = error_details_pb2.BadRequest.FieldViolation(
            field=error.field, description=error.description
        )
        return [error_details_pb2.BadRequest(field_violations=[violation])]
    if isinstance(error, SessionNotFound):
        return [
            error_details_pb2.ResourceInfo(
                resource_type="session", resource_name=error.session_id, description=str(error)
            )
        ]
    if isinstance(error, ApprovalNotPending):
        return [
            error_details_pb2.ResourceInfo(
                resource_type="approval", resource_name=error.tool_call_id, description=str(error)
            )
        ]
    if isinstance(error, SessionBusy):
        violation = error_details_pb2.PreconditionFailure.Violation(
            type="TASK_IN_PROGRESS", subject=error.session_id, description=str(error)
        )
        return [error_details_pb2.PreconditionFailure(violations=[violation])]
    if isinstance(error, ModeNotAllowed):
        return [
            error_details_pb2.ErrorInfo(
                reason="APPROVAL_MODE_NOT_ALLOWED",
                domain=ERROR_DOMAIN,
                metadata={"approval_mode": error.mode, "allowed": ",".join(error.allowed)},
            )
        ]
    if isinstance(error, LimitExceeded):
        metadata = {"limit": error.limit, "value": str(error.value)}
        if error.session_id is not None:
            metadata["session_id"] = error.session_id
        subject = "server" if error.session_id is None else f"session:{error.session_id}"
        return [
            error_details_pb2.ErrorInfo(
                reason=error.limit.upper() + "_EXCEEDED", domain=ERROR_DOMAIN, metadata=metadata
            ),
            error_details_pb2.QuotaFailure(
                violations=[
                    error_details_pb2.QuotaFailure.Violation(
                        subject=subject, description=str(error)
                    )
                ]
            ),
        ]
    return []


async def abort_with(context: grpc.aio.ServicerContext, error: HubError) -> NoReturn:
    await context.abort_with_status(rpc_status.to_status(status_for(error)))
    raise AssertionError("abort_with_status returned")  # pragma: no cover
