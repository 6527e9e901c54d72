"""Errors as the reference writes them: ``{"error": {"code", "message"}}``.

Every HTTP route answers a failure in this one shape, the dialect's
``POST /v1/runs`` included, because a reference client reads
``body.error?.code`` and loses everything else. An error the server did not
expect is logged and answered as 500 ``internal`` with a fixed sentence: its
type and text can name files or internals and are never sent to a client.
"""

from __future__ import annotations

import enum
import logging

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from omni_grpc.runtime.errors import STATUSES, ErrorCode, HubError, status_of
from omni_grpc.transport.sse.dates import http_date

log = logging.getLogger(__name__)


class HttpRefusal(enum.Enum):
    """The refusals only the HTTP routes make, in the reference's words, each
    with its one status. Whatever the runtime also refuses (a field that is
    wrong: ``ErrorCode.INVALID_REQUEST``) takes its row of the runtime's
    table instead, so it reads as it does on every other transport."""

    BODY_TOO_LARGE = (413, "body_too_large")
    INVALID_JSON = (400, "invalid_json")
    # A body sent compressed: the routes read bodies as they are.
    UNSUPPORTED_ENCODING = (415, "unsupported_encoding")
    NO_UPDATE = (400, "no_update")
    PROJECT_NOT_FOUND = (404, "project_not_found")
    AGENT_NOT_FOUND = (404, "agent_not_found")
    # The dialect: a queued task the server does not queue, a resume whose
    # events are gone from the buffer.
    QUEUE_NOT_SUPPORTED = (409, "queue_not_supported")
    RESUME_UNAVAILABLE = (409, "resume_unavailable")
    # A repeated Idempotency-Key: with another request, or while its first
    # request is still being answered.
    IDEMPOTENCY_KEY_REUSED = (422, "idempotency_key_reused")
    IDEMPOTENCY_KEY_IN_USE = (409, "idempotency_key_in_use")


class ApiError(Exception):
    """A request the HTTP layer itself refuses (bad body, too large, a query
    parameter that is wrong): an ``ErrorCode`` answers from the runtime's
    table, an ``HttpRefusal`` from its own."""

    def __init__(self, code: ErrorCode | HttpRefusal, message: str) -> None:
        super().__init__(message)
        if isinstance(code, ErrorCode):
            row = STATUSES[code]
            self.status, self.code = row.http, row.http_code
        else:
            self.status, self.code = code.value
        self.message = message


INTERNAL_MESSAGE = "Internal server error."


def error_body(code: str, message: str) -> dict[str, dict[str, str]]:
    return {"error": {"code": code, "message": message}}


def error_response(
    status: int, code: str, message: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    return JSONResponse(error_body(code, message), status_code=status, headers=headers)


def hub_error_status(exc: HubError) -> tuple[int, str]:
    """The HTTP status and ``error.code``, from the one table (``runtime.errors``)."""
    status = status_of(exc)
    return status.http, status.http_code


async def on_api_error(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
    return error_response(exc.status, exc.code, exc.message, headers)


async def on_hub_error(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HubError)
    status, code = hub_error_status(exc)
    return error_response(status, code, str(exc))


async def on_http_exception(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    codes = {404: "not_found", 405: "method_not_allowed"}
    return error_response(
        exc.status_code,
        codes.get(exc.status_code, "http_error"),
        str(exc.detail),
        dict(exc.headers) if exc.headers else None,
    )


async def on_unexpected(request: Request, exc: Exception) -> Response:
    log.exception("%s %s failed", request.method, request.url.path, exc_info=exc)
    # Answered outside the middleware stack, so it dates itself.
    return error_response(500, "internal", INTERNAL_MESSAGE, {"Date": http_date()})
