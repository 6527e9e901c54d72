"""Request failures the hub reports; each transport maps them to its own status."""

from __future__ import annotations


class HubError(Exception):
    """Base class: a request the hub refuses (never an engine failure)."""


class InvalidRequest(HubError):
    """A request field is wrong; ``field`` names it (e.g. ``input[2].payload``)."""

    def __init__(self, field: str, description: str) -> None:
        super().__init__(f"{field}: {description}")
        self.field = field
        self.description = description


class SessionNotFound(HubError):
    def __init__(self, session_id: str) -> None:
        super().__init__(f"unknown session {session_id!r}")
        self.session_id = session_id


class SessionBusy(HubError):
    """The session already runs a task (one task at a time)."""

    def __init__(self, session_id: str) -> None:
        super().__init__(f"session {session_id!r} is already running a task")
        self.session_id = session_id


class ApprovalNotPending(HubError):
    def __init__(self, session_id: str, tool_call_id: str) -> None:
        super().__init__(
            f"session {session_id!r} has no pending approval for tool_call_id {tool_call_id!r}"
        )
        self.session_id = session_id
        self.tool_call_id = tool_call_id


class HubClosed(HubError):
    """The server is shutting down and takes no new tasks."""

    def __init__(self) -> None:
        super().__init__("the server is shutting down")


class ModeNotAllowed(HubError):
    """The run asks for an approval mode the operator does not let clients pick."""

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


class BackendUnavailable(HubError):
    """The shared state (Redis) cannot be reached; the request may be retried."""

    def __init__(self, detail: str) -> None:
        super().__init__(f"the session store is unavailable: {detail}")
        self.detail = detail


class Fenced(Exception):
    """A write by a run lease holder that has lost the lease to another replica.

    Not a HubError: no client request causes it; the stale run stops quietly."""

    def __init__(self, session_id: str, token: int) -> None:
        super().__init__(f"session {session_id!r}: lease token {token} is no longer current")
        self.session_id = session_id
        self.token = token


class LimitExceeded(HubError):
    """An operator limit (``runtime.limits``) is reached; nothing was created."""

    # What each limit counts, for the message.
    _WHAT = {
        "max_sessions": "sessions",
        "max_runs": "concurrent runs",
        "max_streams_per_session": "streams on session {session}",
    }

    def __init__(self, limit: str, value: int, session_id: str | None = None) -> None:
        what = self._WHAT.get(limit, limit).format(session=repr(session_id))
        flag = "--" + limit.replace("_", "-")
        super().__init__(f"limit {limit} reached: this server allows {value} {what} ({flag})")
        self.limit = limit
        self.value = value
        self.session_id = session_id


class TooManyStreams(LimitExceeded):
    """The session already has as many open streams here as the operator allows."""

    def __init__(self, session_id: str, limit: int) -> None:
        super().__init__("max_streams_per_session", limit, session_id)
