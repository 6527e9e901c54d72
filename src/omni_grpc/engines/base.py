"""The engine contract: what the server runs behind AgentService.Run.

It mirrors the reference SDK's ``session.run(newMessages, {signal, approve,
thinkingLevel})``: an engine receives this run's new user-side messages and
yields OmniMessages as JSON-shaped dicts (or ``omni_pb2.OmniMessage``, or a
``WireMessage``: the message with the wire bytes it arrived as, from an engine
that relays another server's). The engine owns its history; errors are
yielded as messages, never raised.

Rules every engine follows (the hub checks none of them, ``omni-grpc validate``
checks most):

* Each streamed segment is ``partial_*`` start, delta..., stop, then the
  complete message at once.
* ``options.approve`` is awaited exactly once per complete ``tool_call`` whose
  stop_reason is ``completed``, one call at a time. The engine then yields
  ``approval_decision``; a decision other than ``allow`` is followed by the
  synthetic aborted ``tool_call_output`` (``protocol.denied_tool_output``).
* ``options.approve`` raises ``ApprovalUnanswered`` when nobody decided:
  the run was aborted (or the server is stopping) while the call waited,
  or the wait expired (``--max-approval-wait``). The engine then yields no
  ``approval_decision`` (no one made one) but the call's
  ``protocol.unanswered_tool_output``, which says what happened; any other
  exception counts as ``deny`` (the reference rule).
* When ``options.abort`` is set, the engine yields ``abort`` as its last
  message and returns promptly.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

# Re-exported: an engine finds its words beside its contract.
from omni_grpc.vocabulary import AbortKind as AbortKind
from omni_grpc.vocabulary import Decision as Decision
from omni_grpc.vocabulary import StopReason
from omni_grpc_proto.omni.v1 import omni_pb2

JsonObject = dict[str, Any]


@dataclass(frozen=True, slots=True)
class WireMessage:
    """A message and its protobuf wire bytes as they arrived (a relaying
    engine's, such as ``grpc://``): the hub records and sends those bytes as
    they are and reads the JSON text from them, where it would otherwise
    serialize ``message`` again. ``wire`` must be ``message``'s own encoding."""

    message: omni_pb2.OmniMessage
    wire: bytes


# What an engine may yield: a JSON-shaped dict, the protobuf message, or the
# message with its wire bytes.
EngineMessage = Mapping[str, Any] | omni_pb2.OmniMessage | WireMessage
ApproveFn = Callable[[JsonObject], Awaitable[Decision]]


class ApprovalUnanswered(Exception):
    """A tool call's approval ended with no decision from anyone.

    ``stop_reason`` is the reference's word for what happened (``aborted``:
    the run was stopped while the call waited; ``timeout``: the wait ran
    out) and ``reason`` the words for it (the abort's reason, e.g. "aborted
    by user" or "server shutting down"; or the wait that expired)."""

    def __init__(self, stop_reason: StopReason, reason: str) -> None:
        super().__init__(reason)
        self.stop_reason = stop_reason
        self.reason = reason


class AbortSignal:
    """An asyncio event that also carries the abort reason and who asked for it."""

    def __init__(self) -> None:
        self._event = asyncio.Event()
        self.reason: str | None = None
        self.kind: AbortKind | None = None

    def set(self, reason: str | None = None, kind: AbortKind = AbortKind.USER) -> None:
        if not self._event.is_set():
            self.reason = reason
            self.kind = kind
            self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()

    async def wait(self) -> None:
        await self._event.wait()


@runtime_checkable
class SessionTrace(Protocol):
    """A session's recorded messages, as an engine may read them (the hub writes)."""

    @property
    def location(self) -> Path | None:
        """The file appended to, when the trace is one (for engines in another
        process, which read it themselves); None otherwise."""
        ...

    def messages(self) -> list[JsonObject]:
        """The recorded messages in order, torn lines skipped."""
        ...

    def iter_messages(self, *, skip_last: int = 0) -> Iterator[JsonObject]:
        """``messages()`` one at a time, without the last ``skip_last`` (a
        run's own input, which the engine has as its argument: those are not
        converted at all). An engine that folds the past (counts, ids, totals)
        need not hold a long session's history at once."""
        ...


@dataclass
class RunOptions:
    session_id: str
    approve: ApproveFn
    abort: AbortSignal
    # "none" | "low" | "medium" | "high" | "xhigh" | "max", or None for the default.
    thinking_level: str | None = None
    # A directory the engine may use as the session's workspace.
    workspace: Path = field(default_factory=Path.cwd)
    # The session's trace, for engines that rebuild history from it.
    trace: SessionTrace | None = None
    # RunRequest.metadata, as plain JSON.
    metadata: JsonObject = field(default_factory=dict)

    @property
    def trace_path(self) -> Path | None:
        """The trace's file, when it is one."""
        return self.trace.location if self.trace is not None else None


@runtime_checkable
class Engine(Protocol):
    def run(self, input: list[JsonObject], options: RunOptions) -> AsyncIterator[EngineMessage]:
        """Yields the run's messages (an async generator)."""
        ...


@runtime_checkable
class DescribesSession(Protocol):
    """Optional: engines that know their model describe it for session_meta."""

    def session_meta(self, session_id: str, workspace: Path) -> JsonObject:
        """The session_meta payload (session_id, provider, model_id, ...)."""
        ...


@runtime_checkable
class ReadOnlyTools(Protocol):
    """Optional: engines say which tools only read (approval mode read-only runs them)."""

    def is_read_only_tool(self, name: str) -> bool: ...


@runtime_checkable
class ListsTools(Protocol):
    """Optional: engines that know their tools before any run (``tool_list_ready``
    announces them in a run); the A2A card lists them as the agent's skills."""

    def tool_definitions(self) -> list[JsonObject]:
        """Tool definitions as ``protocol.tool_definition`` builds them."""
        ...


@runtime_checkable
class RetriesRequests(Protocol):
    """Optional: engines that retry a failed model request say how many
    attempts they make in all, so the server's log can say "attempt 2/5"."""

    @property
    def max_attempts(self) -> int: ...


@runtime_checkable
class ClosableEngine(Protocol):
    """Optional: engines holding resources (processes, channels) release them here."""

    async def aclose(self) -> None: ...


# A factory named by ``--engine module:factory``: called with the engine
# options from the command line (``--engine-opt key=value``) as strings.
EngineFactory = Callable[..., Engine]
