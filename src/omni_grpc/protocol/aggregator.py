"""``PartialAggregator``: joins ``partial_*`` fragments into complete messages with
the reference semantics (``aggregate.ts``).

The fragment rules are those of :mod:`omni_grpc.protocol.streaming`, with the
reference aggregator's key: ``origin`` is not part of it, so text from two
origins at once collides. What this adds is when messages come out:

* ``stop`` finalizes its fragment; a ``start`` on an open key finalizes the open
  one first. Finalized messages come from the builders: a new timestamp (from
  ``clock``), no fidelity, no origin, no sender.
* Non-partial messages pass through unchanged and in order.
* :meth:`~PartialAggregator.flush` finalizes what is still open, in opening order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from omni_grpc.protocol.streaming import PARTIAL_KINDS, Fragment, OpenFragments
from omni_grpc.protocol.timestamps import Clock, now_timestamp

Json = dict[str, Any]


class PartialAggregator:
    """Feed messages with :meth:`push`; call :meth:`flush` at the end of a stream."""

    def __init__(self, clock: Clock = now_timestamp) -> None:
        self._clock = clock
        self._open = OpenFragments()

    def push(self, msg: Mapping[str, Any]) -> list[Json]:
        """Returns the messages that are complete after ``msg``: itself when it is
        not a partial, a finalized fragment on ``stop`` (or on a colliding ``start``)."""
        payload = msg.get("payload")
        kind = payload.get("type") if isinstance(payload, Mapping) else None
        if msg.get("type") != "model_msg" or kind not in PARTIAL_KINDS:
            return [dict(msg)]
        assert isinstance(payload, Mapping)
        step = self._open.push(payload)  # no origin: the reference key ignores it
        assert step is not None
        out: list[Json] = []
        if step.replaced is not None:
            out.append(self._finalize(step.replaced))
        if step.stopped:
            out.append(self._finalize(step.fragment))
        return out

    def flush(self) -> list[Json]:
        """Finalizes the fragments still open, in the order they were opened."""
        return [self._finalize(f) for f in self._open.take_all()]

    @property
    def open_count(self) -> int:
        return len(self._open)

    def _finalize(self, fragment: Fragment) -> Json:
        return fragment.complete(timestamp=self._clock())


def aggregate_all(
    messages: Iterable[Mapping[str, Any]], *, clock: Clock = now_timestamp
) -> list[Json]:
    """Push every message, then flush."""
    aggregator = PartialAggregator(clock)
    out: list[Json] = []
    for msg in messages:
        out.extend(aggregator.push(msg))
    out.extend(aggregator.flush())
    return out
