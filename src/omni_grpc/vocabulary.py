"""The words the layers exchange, spelled once.

Every value here is a wire spelling: what the reference writes in JSON, what a
client sends in a request body, or what travels in a header. The enums are
``StrEnum`` so a member *is* its spelling (``Decision.ALLOW == "allow"``) and
passes unchanged to the codec and the builders; code compares against the
member, never against a literal, so a typo is a NameError rather than a branch
that silently never runs.

The protobuf enums in ``omni_pb2`` are the gRPC side of some of these words;
the tables that map one to the other live with the codec and the transports.
"""

from __future__ import annotations

import enum
from typing import Final

# ---- approvals ------------------------------------------------------------------


class Decision(enum.StrEnum):
    """An ``approval_decision``: the host allowed the call, the user refused it,
    or the command policy vetoed it without asking."""

    ALLOW = "allow"
    DENY = "deny"
    FORBIDDEN = "forbidden"


class ApprovalMode(enum.StrEnum):
    """How a run's tool calls are approved (``approvalMode`` / ``--approval``)."""

    ALLOW_ALL = "allow-all"
    DENY_ALL = "deny-all"
    # Tools the engine declares read-only run; the others are denied.
    READ_ONLY = "read-only"
    # Each call waits, with no timeout, for an Approve.
    ASK = "ask"


# The reference server's name for ASK (it spells the other modes as we do).
REFERENCE_ASK = "always-ask"


class ThinkingLevel(enum.StrEnum):
    """How hard the model thinks (``thinkingLevel``); absent means the engine's default."""

    NONE = "none"
    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"
    XHIGH = "xhigh"
    MAX = "max"


# ---- streams --------------------------------------------------------------------


class StopReason(enum.StrEnum):
    """Why a message, fragment or request ended (``stop_reason`` / ``status``)."""

    COMPLETED = "completed"
    FAILED = "failed"
    ABORTED = "aborted"
    TIMEOUT = "timeout"
    MALFORMED = "malformed"
    AUTH = "auth"  # since reference v0.1.3


class EventType(enum.StrEnum):
    """A ``partial_*`` fragment's place in its segment."""

    START = "start"
    DELTA = "delta"
    STOP = "stop"


class RunOutcome(enum.StrEnum):
    """How a run ended: the dialect's ``done.status``, the metrics' run label."""

    COMPLETED = "completed"
    # Someone asked for the stop (see AbortKind.is_failure).
    ABORTED = "aborted"
    FAILED = "failed"


class TaskStatus(enum.StrEnum):
    """How a run (an A2A task) stands, as the task index keeps it."""

    WORKING = "working"
    # A tool call waits for a decision.
    INPUT_REQUIRED = "input_required"
    COMPLETED = "completed"
    # Ended by an abort someone asked for, or by its client going away.
    CANCELED = "canceled"
    FAILED = "failed"

    @property
    def ended(self) -> bool:
        return self not in (TaskStatus.WORKING, TaskStatus.INPUT_REQUIRED)


class SessionState(enum.StrEnum):
    """A session's ``task_state`` (and ``SessionInfo.state``)."""

    IDLE = "idle"
    RUNNING = "running"
    COMPACTING = "compacting"


class SessionLifecycle(enum.StrEnum):
    """Where a session is in its life: one state, kept by the session index
    (``runtime.session_index``) on every backend, and checked in the same
    atomic step that claims a run (``RunLease.claim``).

    created -> live -> deleting -> deleted, never back (a delete that fails
    half way makes the session live again, so it can be asked again)."""

    # In the index (``--max-sessions`` counted it), its files still being
    # made: not listed, and neither run nor deleted. A Run that made it
    # makes it live with its claim.
    CREATED = "created"
    # Listed; a run may start on it.
    LIVE = "live"
    # A delete has begun: no run starts any more; the running one is aborted,
    # and once it has ended the files are moved or removed.
    DELETING = "deleting"
    # Gone: the index keeps nothing of it (no record, no key in Redis), and
    # nothing of it is left where a restart looks for sessions.
    DELETED = "deleted"


class AbortKind(enum.StrEnum):
    """Who or what ended a run with ``abort``.

    The reference's ``abort`` message carries only a free-text reason, so the
    kind never goes into a message or a trace: the hub knows it (it set the
    abort signal, or saw an engine give up unasked) and attaches it to the
    published event, and views such as the SSE dialect read it there instead
    of guessing from the reason's wording.
    """

    # Someone asked: the Abort RPC, ``POST /abort``.
    USER = "user"
    # The client that started the run went away (a cancelled Run call, a dialect
    # client that hung up).
    CLIENT_GONE = "client_gone"
    # The server is shutting down and stops every run.
    SHUTDOWN = "shutdown"
    # The engine gave up on its own (``llm request error: ...``), crashed,
    # produced an invalid message or ignored the abort.
    ENGINE_FAILURE = "engine_failure"
    # The server could not go on with the run: its trace or event log failed.
    SERVER_FAILURE = "server_failure"
    # The replica running the session died; another one closed the run.
    REPLICA_LOST = "replica_lost"

    @property
    def is_failure(self) -> bool:
        """True when nobody asked for the stop: the run failed."""
        return self in _FAILURES

    @property
    def default_reason(self) -> str:
        """The ``abort.reason`` written when the caller gave none."""
        return _DEFAULT_REASONS[self]


_FAILURES: Final = frozenset(
    {AbortKind.ENGINE_FAILURE, AbortKind.SERVER_FAILURE, AbortKind.REPLICA_LOST}
)
_DEFAULT_REASONS: Final = {
    AbortKind.USER: "aborted by user",
    AbortKind.CLIENT_GONE: "client disconnected",
    AbortKind.SHUTDOWN: "server shutting down",
    AbortKind.ENGINE_FAILURE: "engine error",
    AbortKind.SERVER_FAILURE: "server error",
    AbortKind.REPLICA_LOST: "the replica running the session was lost",
}

# The reason every engine writes when the signal came without one.
USER_ABORT_REASON: Final = AbortKind.USER.default_reason

# ---- headers and SSE names --------------------------------------------------------

# gRPC metadata (initial) and HTTP response header naming the run's session.
SESSION_HEADER: Final = "omni-session-id"
# The attempts the engine makes per model request (when it retries), so a
# client can say "attempt 2/5" of a request_end that announces a retry.
MAX_ATTEMPTS_HEADER: Final = "omni-engine-max-attempts"
# The SSE resume header, and the query parameter EventSource polyfills use.
LAST_EVENT_ID_HEADER: Final = "Last-Event-ID"
LAST_EVENT_ID_PARAM: Final = "lastEventId"
AUTHORIZATION_HEADER: Final = "Authorization"
# A task's POST sent again with the same key gets the first one's answer
# (runtime/idempotency.py); a repeated answer says so.
IDEMPOTENCY_KEY_HEADER: Final = "Idempotency-Key"
IDEMPOTENT_REPLAYED_HEADER: Final = "Idempotent-Replayed"
# The SSE event name of the reference's control events; messages carry none.
SERVER_EVENT: Final = "server_event"


class DialectEventName(enum.StrEnum):
    """The named events of the Omni SSE dialect (``POST /v1/runs``): the seed's
    six, and the one extension announcing a pending approval."""

    THOUGHT = "thought"
    TOOL_CALL = "tool_call"
    TOOL_RESULT = "tool_result"
    MESSAGE = "message"
    ERROR = "error"
    DONE = "done"
    APPROVAL_REQUEST = "approval_request"
