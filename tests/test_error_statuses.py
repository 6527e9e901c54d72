"""One table gives every HubError its gRPC and its HTTP status.

Every HubError subclass anywhere in the package must have a code, and both
transports must answer it from the table, so a refusal reads the same on
gRPC and over HTTP (they used to be two ladders: an unknown HubError was
INTERNAL on gRPC and 400 on HTTP).
"""

from __future__ import annotations

import importlib
import pkgutil

import pytest
from google.rpc import code_pb2

import omni_grpc
from omni_grpc.runtime.agent_service import RunFailed
from omni_grpc.runtime.errors import (
    STATUSES,
    ApprovalNotPending,
    BackendUnavailable,
    CallEnded,
    ErrorCode,
    EventsMissed,
    HubClosed,
    HubError,
    InvalidRequest,
    LimitExceeded,
    ModeNotAllowed,
    Overloaded,
    SessionBusy,
    SessionDeleted,
    SessionNotFound,
    StorageUnavailable,
    TooManyStreams,
    Unauthenticated,
)
from omni_grpc.runtime.health import RunFailure
from omni_grpc.runtime.redis.connection import NotAPrimary
from omni_grpc.transport.grpc.status import status_for
from omni_grpc.transport.sse.errors import hub_error_status

# One instance of each case of every HubError subclass (a subclass missing
# here fails the coverage test below: add its cases).
SAMPLES: dict[type[HubError], list[HubError]] = {
    InvalidRequest: [InvalidRequest("input", "empty")],
    SessionNotFound: [SessionNotFound("s1")],
    SessionDeleted: [SessionDeleted("s1")],
    SessionBusy: [SessionBusy("s1")],
    ApprovalNotPending: [ApprovalNotPending("s1", "call-1")],
    HubClosed: [HubClosed()],
    ModeNotAllowed: [ModeNotAllowed("allow-all", ("ask",))],
    StorageUnavailable: [
        StorageUnavailable("disk full", exhausted=True),
        StorageUnavailable("read-only", exhausted=False),
    ],
    BackendUnavailable: [BackendUnavailable("connection refused")],
    NotAPrimary: [NotAPrimary("redis://127.0.0.1:7000/0 is a Redis Cluster node")],
    LimitExceeded: [
        LimitExceeded("max_sessions", 3),
        LimitExceeded("max_runs", 2),
        LimitExceeded("some_future_limit", 1),
    ],
    TooManyStreams: [TooManyStreams("s1", 4)],
    Overloaded: [Overloaded(97, 90, 120)],
    EventsMissed: [
        EventsMissed("s1", "ab12cd34-7", "ab12cd34-40"),
        EventsMissed("s1", None, "ab12cd34-3"),
    ],
    Unauthenticated: [Unauthenticated("missing bearer token")],
    CallEnded: [CallEnded("Run")],
    RunFailed: [
        RunFailed(RunFailure("resource_exhausted", "No space left on device")),
        RunFailed(RunFailure("unavailable", "Read-only file system")),
    ],
}


def _every_subclass(cls: type[HubError]) -> set[type[HubError]]:
    out: set[type[HubError]] = set()
    for sub in cls.__subclasses__():
        out |= {sub, *_every_subclass(sub)}
    return out


def _import_the_package() -> None:
    for module in pkgutil.walk_packages(omni_grpc.__path__, "omni_grpc."):
        if module.name.endswith("__main__"):
            continue
        importlib.import_module(module.name)


def test_every_hub_error_subclass_has_a_code_in_the_table() -> None:
    _import_the_package()  # a subclass defined anywhere is found
    missing = {c.__qualname__ for c in _every_subclass(HubError)} - {
        c.__qualname__ for c in SAMPLES
    }
    assert not missing, f"HubError subclasses with no sample here: {sorted(missing)}"
    for cls, errors in SAMPLES.items():
        for error in errors:
            assert type(error) is cls
            assert error.code in STATUSES
            assert error.code is not ErrorCode.INTERNAL, f"{cls.__name__} names no code"


def test_the_table_has_a_row_for_every_code() -> None:
    assert set(STATUSES) == set(ErrorCode)


@pytest.mark.parametrize(
    "error", [e for errors in SAMPLES.values() for e in errors] + [HubError("a bug")], ids=repr
)
def test_both_transports_answer_from_the_one_table(error: HubError) -> None:
    row = STATUSES[error.code]
    assert status_for(error).code == row.grpc
    assert hub_error_status(error) == (row.http, row.http_code)


def test_an_error_with_no_code_is_internal_on_both_transports() -> None:
    bug = HubError("something the runtime did not expect")
    assert status_for(bug).code == code_pb2.INTERNAL
    assert hub_error_status(bug) == (500, "internal")


def test_the_statuses_clients_already_see_are_kept() -> None:
    expected = {
        InvalidRequest: (code_pb2.INVALID_ARGUMENT, 400, "invalid_request"),
        SessionNotFound: (code_pb2.NOT_FOUND, 404, "session_not_found"),
        # A stream whose session was deleted under it ends as an unknown session would.
        SessionDeleted: (code_pb2.NOT_FOUND, 404, "session_not_found"),
        SessionBusy: (code_pb2.ABORTED, 409, "task_in_progress"),
        ApprovalNotPending: (code_pb2.NOT_FOUND, 404, "approval_not_found"),
        HubClosed: (code_pb2.UNAVAILABLE, 503, "unavailable"),
        ModeNotAllowed: (code_pb2.PERMISSION_DENIED, 403, "approval_mode_not_allowed"),
        BackendUnavailable: (code_pb2.UNAVAILABLE, 503, "unavailable"),
        TooManyStreams: (code_pb2.RESOURCE_EXHAUSTED, 429, "too_many_streams"),
        # An overloaded replica's refusal: a limit like the others, told at once.
        Overloaded: (code_pb2.RESOURCE_EXHAUSTED, 429, "too_many_requests"),
    }
    missed = SAMPLES[EventsMissed][0]
    assert (status_for(missed).code, *hub_error_status(missed)) == (
        code_pb2.ABORTED,
        409,
        "resync_required",
    )
    for cls, (grpc_code, http, word) in expected.items():
        [error] = SAMPLES[cls]
        assert (status_for(error).code, *hub_error_status(error)) == (grpc_code, http, word)
    full, read_only = SAMPLES[StorageUnavailable]
    assert status_for(full).code == code_pb2.RESOURCE_EXHAUSTED
    assert status_for(read_only).code == code_pb2.UNAVAILABLE
    # One storage word; each code's own HTTP status (RESOURCE_EXHAUSTED is 429).
    assert hub_error_status(full) == (429, "storage_unavailable")
    assert hub_error_status(read_only) == (503, "storage_unavailable")
    limits = [(status_for(e).code, *hub_error_status(e)) for e in SAMPLES[LimitExceeded]]
    assert limits == [
        (code_pb2.RESOURCE_EXHAUSTED, 429, "too_many_sessions"),
        (code_pb2.RESOURCE_EXHAUSTED, 429, "too_many_runs"),
        (code_pb2.RESOURCE_EXHAUSTED, 429, "too_many_requests"),
    ]
