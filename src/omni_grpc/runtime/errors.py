"""Request failures the runtime reports, each with one code, and the one
table (``STATUSES``) that gives every code its status on every transport.

A row names the code's gRPC status and the word an HTTP body carries; its
HTTP status is not a second choice but the gRPC code's own HTTP mapping
(``HTTP_STATUS_OF``, google.rpc.Code's, which is also the Connect
protocol's), so the same refusal has one status whichever way it travels:
gRPC and gRPC-Web send the code, Connect its name and (unary) that HTTP
status, the HTTP routes that status with the word, and A2A the A2A error
derived from the code (``transport/a2a/errors.py``). A transport answers a
``HubError`` from ``STATUSES[error.code]`` alone. A HubError whose class
names no code is a server bug: ``INTERNAL`` on gRPC and 500 on HTTP.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from google.protobuf import duration_pb2
from google.protobuf.message import Message
from google.rpc import code_pb2, error_details_pb2


class ErrorCode(enum.StrEnum):
    # The values are the HTTP error codes of the reference's ``{"error": {"code"}}``.
    INVALID_REQUEST = "invalid_request"
    SESSION_NOT_FOUND = "session_not_found"
    APPROVAL_NOT_FOUND = "approval_not_found"
    TASK_IN_PROGRESS = "task_in_progress"
    APPROVAL_MODE_NOT_ALLOWED = "approval_mode_not_allowed"
    TOO_MANY_SESSIONS = "too_many_sessions"
    TOO_MANY_RUNS = "too_many_runs"
    TOO_MANY_STREAMS = "too_many_streams"
    TOO_MANY_REQUESTS = "too_many_requests"
    STORAGE_FULL = "storage_full"
    STORAGE_UNAVAILABLE = "storage_unavailable"
    UNAVAILABLE = "unavailable"
    EVENTS_MISSED = "resync_required"
    INTERNAL = "internal"
    UNAUTHENTICATED = "unauthenticated"
    CALL_ENDED = "call_ended"


# The HTTP status of each gRPC code (google/rpc/code.proto's "HTTP Mapping",
# which the Connect protocol's error codes follow).
HTTP_STATUS_OF: dict[int, int] = {
    code_pb2.CANCELLED: 499,
    code_pb2.UNKNOWN: 500,
    code_pb2.INVALID_ARGUMENT: 400,
    code_pb2.DEADLINE_EXCEEDED: 504,
    code_pb2.NOT_FOUND: 404,
    code_pb2.ALREADY_EXISTS: 409,
    code_pb2.PERMISSION_DENIED: 403,
    code_pb2.RESOURCE_EXHAUSTED: 429,
    code_pb2.FAILED_PRECONDITION: 400,
    code_pb2.ABORTED: 409,
    code_pb2.OUT_OF_RANGE: 400,
    code_pb2.UNIMPLEMENTED: 501,
    code_pb2.INTERNAL: 500,
    code_pb2.UNAVAILABLE: 503,
    code_pb2.DATA_LOSS: 500,
    code_pb2.UNAUTHENTICATED: 401,
}


@dataclass(frozen=True)
class ErrorStatus:
    grpc: int  # a google.rpc.Code
    # The ``error.code`` an HTTP body carries.
    http_code: str

    @property
    def http(self) -> int:
        """The HTTP status: the gRPC code's own (``HTTP_STATUS_OF``)."""
        return HTTP_STATUS_OF[self.grpc]


STATUSES: dict[ErrorCode, ErrorStatus] = {
    ErrorCode.INVALID_REQUEST: ErrorStatus(code_pb2.INVALID_ARGUMENT, "invalid_request"),
    ErrorCode.SESSION_NOT_FOUND: ErrorStatus(code_pb2.NOT_FOUND, "session_not_found"),
    ErrorCode.APPROVAL_NOT_FOUND: ErrorStatus(code_pb2.NOT_FOUND, "approval_not_found"),
    # Another task runs: a conflict the client resolves by trying again once
    # it has ended (gRPC's ABORTED, HTTP 409 as the reference answers it).
    ErrorCode.TASK_IN_PROGRESS: ErrorStatus(code_pb2.ABORTED, "task_in_progress"),
    ErrorCode.APPROVAL_MODE_NOT_ALLOWED: ErrorStatus(
        code_pb2.PERMISSION_DENIED, "approval_mode_not_allowed"
    ),
    ErrorCode.TOO_MANY_SESSIONS: ErrorStatus(code_pb2.RESOURCE_EXHAUSTED, "too_many_sessions"),
    ErrorCode.TOO_MANY_RUNS: ErrorStatus(code_pb2.RESOURCE_EXHAUSTED, "too_many_runs"),
    ErrorCode.TOO_MANY_STREAMS: ErrorStatus(code_pb2.RESOURCE_EXHAUSTED, "too_many_streams"),
    ErrorCode.TOO_MANY_REQUESTS: ErrorStatus(code_pb2.RESOURCE_EXHAUSTED, "too_many_requests"),
    # A full disk is RESOURCE_EXHAUSTED ("the entire file system is out of
    # space"); HTTP has one storage word for both (the reference's clients
    # know only that one), each with its code's status.
    ErrorCode.STORAGE_FULL: ErrorStatus(code_pb2.RESOURCE_EXHAUSTED, "storage_unavailable"),
    ErrorCode.STORAGE_UNAVAILABLE: ErrorStatus(code_pb2.UNAVAILABLE, "storage_unavailable"),
    ErrorCode.UNAVAILABLE: ErrorStatus(code_pb2.UNAVAILABLE, "unavailable"),
    # A stream that fell behind its replay window: a sequencer check failed
    # (gRPC's ABORTED); what it missed is in the session's history.
    ErrorCode.EVENTS_MISSED: ErrorStatus(code_pb2.ABORTED, "resync_required"),
    ErrorCode.INTERNAL: ErrorStatus(code_pb2.INTERNAL, "internal"),
    # No token, or not the server's (runtime.call_context.BearerCheck).
    ErrorCode.UNAUTHENTICATED: ErrorStatus(code_pb2.UNAUTHENTICATED, "unauthenticated"),
    # The call's deadline passed before the runtime answered it: gRPC's own
    # code for it, so every transport tells it as gRPC does.
    ErrorCode.CALL_ENDED: ErrorStatus(code_pb2.DEADLINE_EXCEEDED, "call_ended"),
}


def status_of(error: HubError) -> ErrorStatus:
    return STATUSES[error.code]


# The domain of the ``google.rpc.ErrorInfo`` details.
ERROR_DOMAIN = "omni-grpc"


class HubError(Exception):
    """Base class: a request the hub refuses (never an engine failure)."""

    # Which row of STATUSES answers it (a class or, where it depends on the
    # case, an instance sets its own).
    code: ErrorCode = ErrorCode.INTERNAL


class InvalidRequest(HubError):
    """A request field is wrong; ``field`` names it (e.g. ``input[2].payload``)."""

    code = ErrorCode.INVALID_REQUEST

    def __init__(self, field: str, description: str) -> None:
        super().__init__(f"{field}: {description}")
        self.field = field
        self.description = description


class SessionNotFound(HubError):
    code = ErrorCode.SESSION_NOT_FOUND

    def __init__(self, session_id: str) -> None:
        super().__init__(f"unknown session {session_id!r}")
        self.session_id = session_id


class SessionDeleted(SessionNotFound):
    """The session a stream followed was deleted while it was open."""

    def __init__(self, session_id: str) -> None:
        super().__init__(session_id)
        self.args = (f"session {session_id!r} was deleted",)


class SessionBusy(HubError):
    """The session already runs a task (one task at a time)."""

    code = ErrorCode.TASK_IN_PROGRESS

    def __init__(self, session_id: str) -> None:
        super().__init__(f"session {session_id!r} is already running a task")
        self.session_id = session_id


class ApprovalNotPending(HubError):
    code = ErrorCode.APPROVAL_NOT_FOUND

    def __init__(self, session_id: str, tool_call_id: str) -> None:
        super().__init__(
            f"session {session_id!r} has no pending approval for tool_call_id {tool_call_id!r}"
        )
        self.session_id = session_id
        self.tool_call_id = tool_call_id


class HubClosed(HubError):
    """The server is shutting down and takes no new tasks."""

    code = ErrorCode.UNAVAILABLE

    def __init__(self) -> None:
        super().__init__("the server is shutting down")


class ModeNotAllowed(HubError):
    """The run asks for an approval mode the operator does not let clients pick."""

    code = ErrorCode.APPROVAL_MODE_NOT_ALLOWED

    def __init__(self, mode: str, allowed: tuple[str, ...]) -> None:
        super().__init__(
            f"approval_mode {mode} is not allowed on this server (allowed: {', '.join(allowed)})"
        )
        self.mode = mode
        self.allowed = allowed


class StorageUnavailable(HubError):
    """The trace storage is failing (full or read-only): no run can be recorded."""

    def __init__(self, problem: str, *, exhausted: bool) -> None:
        super().__init__(f"the server cannot record runs now: {problem}")
        self.problem = problem
        self.exhausted = exhausted
        self.code = ErrorCode.STORAGE_FULL if exhausted else ErrorCode.STORAGE_UNAVAILABLE


class BackendUnavailable(HubError):
    """The shared state (Redis) cannot be reached; the request may be retried."""

    code = ErrorCode.UNAVAILABLE

    def __init__(self, detail: str) -> None:
        super().__init__(f"the session store is unavailable: {detail}")
        self.detail = detail


class Unauthenticated(HubError):
    """The call carries no bearer token, or not the server's."""

    code = ErrorCode.UNAUTHENTICATED

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class CallEnded(HubError):
    """The call's deadline passed before the runtime could answer it."""

    code = ErrorCode.CALL_ENDED

    def __init__(self, what: str) -> None:
        super().__init__(f"the {what} call's deadline passed")
        self.what = what


class Fenced(Exception):
    """A write by a run lease holder that has lost the lease to another replica.

    Not a HubError: no client request causes it; the stale run stops quietly."""

    def __init__(self, session_id: str, token: int) -> None:
        super().__init__(f"session {session_id!r}: lease token {token} is no longer current")
        self.session_id = session_id
        self.token = token


class RecordOutOfOrder(Fenced):
    """A log refused a record whose number does not follow its last (a gap or
    a repeat): the trace and the log are one journal, numbered by the trace,
    so the writer is not the one the journal follows (a stale owner whose
    records another replica's close already numbered past). A ``Fenced``:
    the run stops as a fenced one does."""

    def __init__(self, session_id: str, number: int, last: int | None) -> None:
        Exception.__init__(
            self,
            f"session {session_id!r}: record {number} does not follow the log's last ({last})",
        )
        self.session_id = session_id
        self.token = 0
        self.number = number
        self.last = last


class EventsMissed(HubError):
    """A stream was cut off behind the replay window (``resync_required``): it
    went on live, but events between ``last_event_id`` and ``resync_event_id``
    were never sent on it. A call that streamed a whole run ends with this
    after the task end, never as a success."""

    code = ErrorCode.EVENTS_MISSED

    def __init__(self, session_id: str, last_event_id: str | None, resync_event_id: str) -> None:
        after = f"after {last_event_id}" if last_event_id else "from the run's start"
        super().__init__(
            f"events {after} up to {resync_event_id} were not delivered: the stream fell "
            f"behind the replay window (resync_required); GetHistory of session "
            f"{session_id} has the whole record"
        )
        self.session_id = session_id
        self.last_event_id = last_event_id
        self.resync_event_id = resync_event_id


class LimitExceeded(HubError):
    """An operator limit (``runtime.limits``) is reached; nothing was created."""

    # What each limit counts, for the message.
    _WHAT = {
        "max_sessions": "sessions",
        "max_runs": "concurrent runs",
        "max_streams_per_session": "streams on session {session}",
    }
    _CODES = {
        "max_sessions": ErrorCode.TOO_MANY_SESSIONS,
        "max_runs": ErrorCode.TOO_MANY_RUNS,
        "max_streams_per_session": ErrorCode.TOO_MANY_STREAMS,
    }

    def __init__(self, limit: str, value: int, session_id: str | None = None) -> None:
        what = self._WHAT.get(limit, limit).format(session=repr(session_id))
        flag = "--" + limit.replace("_", "-")
        hint = "; delete sessions to make room" if limit == "max_sessions" else ""
        super().__init__(f"limit {limit} reached: this server allows {value} {what} ({flag}){hint}")
        self.limit = limit
        self.value = value
        self.code = self._CODES.get(limit, ErrorCode.TOO_MANY_REQUESTS)
        self.session_id = session_id


class Overloaded(LimitExceeded):
    """The replica's event loop has had no idle time to speak of while it
    runs many runs (``runtime.loop_load``): a new run is refused before
    anything is created, and a later try (or another replica) may pass."""

    # Seconds a client is told to wait before it tries again (RetryInfo).
    RETRY_AFTER = 1

    def __init__(self, busy_percent: int, limit_percent: int, runs: int) -> None:
        HubError.__init__(
            self,
            f"limit max_loop_busy reached: this server's event loop was busy "
            f"{busy_percent} % of the last second with {runs} runs going, more than it "
            f"allows (--max-loop-busy {limit_percent}): it is overloaded; retry in "
            f"{self.RETRY_AFTER} s or on another replica",
        )
        self.limit = "max_loop_busy"
        self.value = limit_percent
        self.code = ErrorCode.TOO_MANY_REQUESTS
        self.session_id = None


class TooManyStreams(LimitExceeded):
    """The session already has as many open streams here as the operator allows."""

    def __init__(self, session_id: str, limit: int) -> None:
        super().__init__("max_streams_per_session", limit, session_id)


def details_of(error: HubError) -> list[Message]:
    """The ``google.rpc`` details a status carries for ``error`` (on gRPC, and
    in Connect's and gRPC-Web's errors): INVALID_ARGUMENT a ``BadRequest``
    naming the field, NOT_FOUND a ``ResourceInfo``, a busy session a
    ``PreconditionFailure``, a limit an ``ErrorInfo`` and a ``QuotaFailure``."""
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
        # The session's state is what refused it (a PreconditionFailure
        # names it), though the code is ABORTED: try again once it has ended.
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
    if isinstance(error, EventsMissed):
        missed = {"session_id": error.session_id, "resync_event_id": error.resync_event_id}
        if error.last_event_id:
            missed["last_event_id"] = error.last_event_id
        return [
            error_details_pb2.ErrorInfo(
                reason="RESYNC_REQUIRED", domain=ERROR_DOMAIN, metadata=missed
            )
        ]
    if isinstance(error, LimitExceeded):
        metadata = {"limit": error.limit, "value": str(error.value)}
        if error.session_id is not None:
            metadata["session_id"] = error.session_id
        subject = "server" if error.session_id is None else f"session:{error.session_id}"
        retry: list[Message] = []
        if isinstance(error, Overloaded):
            retry = [
                error_details_pb2.RetryInfo(
                    retry_delay=duration_pb2.Duration(seconds=error.RETRY_AFTER)
                )
            ]
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
            *retry,
        ]
    return []
