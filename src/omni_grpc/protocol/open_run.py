"""``OpenRun``: what a run's stream has opened and not closed, and the messages
that close it.

A run's own stream nests fragments inside requests and ends with ``abort``
when it does not complete. Whoever has to end a stream its producer left
unfinished tracks it here: the hub's run guard (an engine that crashed, was
cut off or returned early) and the engines that relay another producer (a
child process, an upstream server) when that producer fails. The fragments
follow :mod:`omni_grpc.protocol.streaming`; requests and the abort are
counted on the run's own chain only, since a child session's stream is its
engine's business.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from omni_grpc.protocol import builders as b
from omni_grpc.protocol.streaming import OpenFragments
from omni_grpc_proto.omni.v1 import omni_pb2

Json = dict[str, Any]
# The run's own chain.
_MAIN: tuple[str, ...] = ()


class OpenRun:
    def __init__(self) -> None:
        # Every chain's fragments (a live tail shows a child's too).
        self.open = OpenFragments()
        self.request_open = False
        self.abort_seen = False

    def observe(self, msg: Mapping[str, Any] | omni_pb2.OmniMessage) -> None:
        """Feeds one message of the run, in order (JSON or protobuf)."""
        if self.open.push_message(msg) is not None:
            return
        if isinstance(msg, omni_pb2.OmniMessage):
            if msg.origin:
                return
            kind = msg.WhichOneof("payload")
        else:
            if msg.get("origin"):
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
        message, or a request without its end."""
        return self.open.unfinished_in(_MAIN) or self.request_open

    def closing(
        self,
        stop_reason: str,
        *,
        abort_reason: str | None = None,
        error: str | None = None,
        request_status: str | None = None,
        report_error: bool = False,
    ) -> list[Json]:
        """The messages that end the run's own chain, in order: each unfinished
        fragment's (see ``OpenFragments.close_all``, with ``stop_reason``), the
        open request's ``request_end`` (``request_status``, default
        ``stop_reason``, carrying ``error``), then ``abort`` with
        ``abort_reason`` unless the run already ended with one.

        ``report_error``: with no request open, open one so that ``error`` is
        recorded in a ``request_end`` (a producer that failed between requests).
        """
        out = self.open.close_all(stop_reason, origin=_MAIN)
        if self.request_open or (report_error and error is not None):
            if not self.request_open:
                out.append(b.request_begin())
            out.append(b.request_end(request_status or stop_reason, error_message=error))
            self.request_open = False
        if abort_reason is not None and not self.abort_seen:
            out.append(b.abort_event(abort_reason))
            self.abort_seen = True
        return out
