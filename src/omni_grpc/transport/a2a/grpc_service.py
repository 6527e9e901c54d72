"""The A2A gRPC service: the SDK's ``GrpcHandler`` with the spec's status codes and version check.

A2A 1.0, section 5.4, maps ``PushNotificationNotSupportedError``,
``UnsupportedOperationError`` and ``VersionNotSupportedError`` to
``UNIMPLEMENTED``; the SDK (1.3) answers ``FAILED_PRECONDITION`` for all three,
and checks the ``A2A-Version`` header on JSON-RPC and HTTP+JSON only. Here the
``a2a-version`` metadata is checked as the HTTP bindings check the header (a
missing one is accepted: the gRPC binding exists from 1.0 on), and the three
errors get the spec's code; the rest of the SDK's table already agrees with it.
"""

from __future__ import annotations

import grpc
from a2a.server.context import ServerCallContext
from a2a.server.request_handlers import grpc_handler
from a2a.utils.constants import PROTOCOL_VERSION_CURRENT, VERSION_HEADER
from a2a.utils.error_handlers import A2A_DOMAIN as DOMAIN
from a2a.utils.errors import (
    A2A_ERROR_REASONS,
    A2AError,
    PushNotificationNotSupportedError,
    UnsupportedOperationError,
    VersionNotSupportedError,
)
from a2a.utils.grpc_status import status_to_grpc
from google.protobuf import message
from google.rpc import error_details_pb2, status_pb2

_SPEC_CODES: dict[type[A2AError], grpc.StatusCode] = {
    PushNotificationNotSupportedError: grpc.StatusCode.UNIMPLEMENTED,
    UnsupportedOperationError: grpc.StatusCode.UNIMPLEMENTED,
    VersionNotSupportedError: grpc.StatusCode.UNIMPLEMENTED,
}


def supported_version(version: str) -> bool:
    """Whether ``version`` (``major.minor``, a patch ignored) is the protocol served."""
    wanted = PROTOCOL_VERSION_CURRENT.split(".")[:2]
    return version.strip().split(".")[:2] == wanted


class A2aGrpcService(grpc_handler.GrpcHandler):
    def _build_call_context(
        self, context: grpc.aio.ServicerContext, request: message.Message
    ) -> ServerCallContext:
        versions = grpc_handler._get_metadata_value(context, VERSION_HEADER)
        for version in versions:
            if not supported_version(version):
                raise VersionNotSupportedError(
                    f"A2A version {version!r} is not supported here;"
                    f" this server speaks {PROTOCOL_VERSION_CURRENT}"
                )
        return super()._build_call_context(context, request)

    async def abort_context(self, error: A2AError, context: grpc.aio.ServicerContext) -> None:
        code = _SPEC_CODES.get(type(error))
        if code is None:
            await super().abort_context(error, context)
            return
        # The rich status the SDK sends, with the spec's code.
        info = error_details_pb2.ErrorInfo(
            reason=A2A_ERROR_REASONS.get(type(error), "UNKNOWN_ERROR"), domain=DOMAIN
        )
        status = status_pb2.Status(code=code.value[0], message=error.message)
        status.details.add().Pack(info)
        rich = status_to_grpc(status)
        context.set_trailing_metadata(
            (*(context.trailing_metadata() or ()), *rich.trailing_metadata)
        )
        await context.abort(rich.code, rich.details)
