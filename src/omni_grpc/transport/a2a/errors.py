"""The runtime's refusals as A2A errors, derived from the runtime's one table.

A2A has fewer words than the runtime (no "busy", no "too many"), so the A2A
error of a runtime code follows from that code's gRPC status
(``runtime.errors.STATUSES``) by one rule: a request the client can put
right is ``InvalidParamsError``, an unknown session (a context or a task)
``TaskNotFoundError``, and what the server cannot do now (limits, storage,
the backend, a bug) ``InternalError``. Every code has an answer, so none
can fail to be reported. ``data`` carries the runtime's own word and HTTP
status, so a client can still tell the codes apart and the same refusal
reads the same here as on every other transport; A2A's own bindings
(JSON-RPC, gRPC, HTTP+JSON) then send the A2A error as A2A maps it.
"""

from __future__ import annotations

from a2a.utils.errors import (
    A2AError,
    ContentTypeNotSupportedError,
    InternalError,
    InvalidParamsError,
    TaskNotFoundError,
)
from google.rpc import code_pb2

from omni_grpc.runtime.errors import STATUSES, ErrorCode, HubError

# The A2A error of each gRPC status a runtime code can have; any other is
# InternalError. NOT_FOUND is InvalidParams but for a session (below).
_BY_GRPC: dict[int, type[A2AError]] = {
    code_pb2.INVALID_ARGUMENT: InvalidParamsError,
    code_pb2.NOT_FOUND: InvalidParamsError,
    code_pb2.PERMISSION_DENIED: InvalidParamsError,
    code_pb2.FAILED_PRECONDITION: InvalidParamsError,
    code_pb2.ABORTED: InvalidParamsError,
}


def a2a_class(code: ErrorCode) -> type[A2AError]:
    """The A2A error a runtime code is answered with."""
    if code is ErrorCode.SESSION_NOT_FOUND:
        return TaskNotFoundError
    return _BY_GRPC.get(STATUSES[code].grpc, InternalError)


def a2a_error(error: HubError) -> A2AError:
    return a2a_class(error.code)(str(error), _data(error.code))


def invalid(field: str, description: str) -> InvalidParamsError:
    """A request field A2A clients got wrong, named as in the JSON form (the
    runtime's ``invalid_request``, whoever found it wrong)."""
    data = {"field": field, **_data(ErrorCode.INVALID_REQUEST)}
    return InvalidParamsError(f"{field}: {description}", data)


def _data(code: ErrorCode) -> dict[str, str]:
    """The runtime's word and HTTP status for ``code``, in an A2A error's data."""
    status = STATUSES[code]
    return {"code": status.http_code, "httpStatus": str(status.http)}


def unsupported_content(field: str, description: str) -> ContentTypeNotSupportedError:
    """A part of a media type this agent does not take (A2A's -32005, HTTP 415,
    gRPC INVALID_ARGUMENT), named as in the JSON form."""
    return ContentTypeNotSupportedError(f"{field}: {description}", {"field": field})
