"""What the server knows is wrong with itself, for health checks to report.

Components the hub depends on (the trace storage; a shared event log) report a
problem under their name and clear it when they work again. Transports turn
the state into their own health answer (gRPC ``NOT_SERVING``), so an operator
or a load balancer sees a full disk before users find it.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from dataclasses import dataclass

# Component names.
STORAGE = "storage"
# The shared backend (Redis), when there is one.
BACKEND = "backend"
# The server is draining (SIGTERM): it finishes its runs and takes no new ones.
DRAINING = "draining"

Listener = Callable[[bool], None]


@dataclass(frozen=True, slots=True)
class RunFailure:
    """Why a run ended early on the server's side, for the run's own client.

    ``code`` is ``resource_exhausted`` (the disk or a quota is full) or
    ``unavailable`` (the storage refused otherwise: read-only, gone).
    """

    code: str
    message: str


def storage_failure(exc: OSError) -> RunFailure:
    full = exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
    # The errno's text only: the exception's own text names server paths,
    # which are the log's business, not the client's.
    reason = os.strerror(exc.errno) if exc.errno else "input/output error"
    return RunFailure(
        "resource_exhausted" if full else "unavailable",
        f"the trace could not be written ({reason}); the run was stopped",
    )


class HealthState:
    def __init__(self) -> None:
        self._problems: dict[str, str] = {}
        self._listeners: list[Listener] = []

    @property
    def serving(self) -> bool:
        return not self._problems

    def problems(self) -> dict[str, str]:
        return dict(self._problems)

    def problem(self, component: str) -> str | None:
        return self._problems.get(component)

    def report(self, component: str, problem: str) -> None:
        was = self.serving
        self._problems[component] = problem
        if was:
            self._notify()

    def clear(self, component: str) -> None:
        if self._problems.pop(component, None) is not None and self.serving:
            self._notify()

    def on_change(self, listener: Listener) -> None:
        """``listener(serving)`` runs on every change between serving and not."""
        self._listeners.append(listener)

    def _notify(self) -> None:
        for listener in self._listeners:
            listener(self.serving)
