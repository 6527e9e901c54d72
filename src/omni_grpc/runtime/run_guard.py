"""Keeps a run's stream well-formed when its engine does not finish it.

Engines close their own fragments and requests and yield ``abort`` last. When
one crashes, yields garbage or ignores an abort past the grace period, the hub
asks this guard for the messages that close what is still open: each open
fragment's ``stop`` and complete message, ``request_end``, then ``abort``.
The fragments follow :mod:`omni_grpc.protocol.streaming`, the rules every
reader of the stream applies, so what the guard closes is exactly what a
client's aggregator still holds open, images included.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from omni_grpc import protocol
from omni_grpc.engines.base import JsonObject
from omni_grpc.protocol.streaming import OpenFragments
from omni_grpc.vocabulary import StopReason

# The run's own chain: a child session's stream is its engine's business.
_MAIN: tuple[str, ...] = ()


class RunGuard:
    def __init__(self) -> None:
        # Every chain's open fragments (the live tail shows a child's too).
        self.open = OpenFragments()
        self.request_open = False
        self.abort_seen = False

    def observe(self, msg: Mapping[str, Any]) -> None:
        """Feeds one message the run emitted, in order."""
        if self.open.push_message(msg) is not None or msg.get("origin"):
            return
        payload = msg.get("payload")
        kind = payload.get("type") if isinstance(payload, Mapping) else None
        if kind == "request_begin":
            self.request_open = True
        elif kind == "request_end":
            self.request_open = False
        elif kind == "abort":
            self.abort_seen = True

    @property
    def unfinished(self) -> bool:
        """The run's own chain left a fragment open, a stop without its complete
        message, or a request without its end: an engine that returns like this
        did not finish its stream either."""
        return self.open.unfinished_in(_MAIN) or self.request_open

    def fragments(self) -> list[JsonObject]:
        """Each open fragment as a synthetic ``start`` carrying what has streamed
        so far, in opening order (the reference live tail's ``fragments``)."""
        return self.open.snapshots()

    def closing_messages(
        self, *, aborted: bool, reason: str, error: str | None
    ) -> list[JsonObject]:
        """What closes the run: fragment stops and completes, request_end, abort."""
        stop_reason = StopReason.ABORTED if aborted else StopReason.FAILED
        out = self.open.close_all(stop_reason, origin=_MAIN)
        if self.request_open:
            out.append(protocol.request_end(stop_reason, error_message=error))
            self.request_open = False
        if not self.abort_seen:
            out.append(protocol.abort_event(reason))
            self.abort_seen = True
        return out
