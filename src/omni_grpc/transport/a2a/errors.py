"""The runtime's refusals as A2A errors: one table, keyed by the runtime's codes.

A2A has fewer words than the runtime (no "busy", no "too many"), so several
codes share an A2A error; ``data`` carries the runtime's own word and HTTP
status (from ``runtime.errors.STATUSES``), so a client can still tell them apart
and the same refusal reads the same here as on every other transport.
"""

from __future__ import annotations

from a2a.utils.errors import (
    A2AError,
    ContentTypeNotSupportedError,
    InternalError,
    InvalidParamsError,
    TaskNotFoundError,
)

from omni_grpc.runtime.errors import STATUSES, ErrorCode, HubError

_ERRORS: dict[ErrorCode, type[A2AError]] = {
    ErrorCode.INVALID_REQUEST: InvalidParamsError,
    ErrorCode.SESSION_NOT_FOUND: TaskNotFoundError,
    ErrorCode.APPROVAL_NOT_FOUND: InvalidParamsError,
    ErrorCode.TASK_IN_PROGRESS: InvalidParamsError,
    ErrorCode.APPROVAL_MODE_NOT_ALLOWED: InvalidParamsError,
    ErrorCode.TOO_MANY_SESSIONS: InternalError,
    ErrorCode.TOO_MANY_RUNS: InternalError,
    ErrorCode.TOO_MANY_STREAMS: InternalError,
    ErrorCode.TOO_MANY_REQUESTS: InternalError,
    ErrorCode.STORAGE_FULL: InternalError,
    ErrorCode.STORAGE_UNAVAILABLE: InternalError,
    ErrorCode.UNAVAILABLE: InternalError,
    ErrorCode.INTERNAL: InternalError,
}


def a2a_error(error: HubError) -> A2AError:
    status = STATUSES[error.code]
    return _ERRORS[error.code](
        str(error), {"code": status.http_code, "httpStatus": str(status.http)}
    )


def invalid(field: str, description: str) -> InvalidParamsError:
    """A request field A2A clients got wrong, named as in the JSON form."""
    return InvalidParamsError(f"{field}: {description}", {"field": field})


def unsupported_content(field: str, description: str) -> ContentTypeNotSupportedError:
    """A part of a media type this agent does not take (A2A's -32005, HTTP 415,
    gRPC INVALID_ARGUMENT), named as in the JSON form."""
    return ContentTypeNotSupportedError(f"{field}: {description}", {"field": field})
