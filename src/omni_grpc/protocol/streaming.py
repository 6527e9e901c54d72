"""The streaming discipline, once: how ``partial_*`` fragments open, grow and close.

A streamed segment is ``start``, ``delta``..., ``stop``, and its complete message
follows the stop at once; the joined deltas equal the complete message. Every
part of the project that reads or writes fragments does it through this module:
the aggregator (joins them), the validator (checks them), the hub's run guard
(closes what a failed engine left open, and paints the live tail) and the
engines (produce them).

:class:`OpenFragments` is the state machine, with the reference rules of
``aggregate.ts``:

* A fragment's key is its origin chain, payload type and ``tool_call_id`` (``""``
  for text and thinking). The reference aggregator leaves origin out of the key;
  :class:`~omni_grpc.protocol.aggregator.PartialAggregator` mirrors that by
  passing no origin, while the live tail keys by origin as the reference
  server's ``live-tail.ts`` does.
* ``start`` on a key that is already open finalizes the open fragment (the
  caller gets it back in :attr:`Step.replaced`), then opens a new one with the
  start's content.
* ``delta`` or ``stop`` with nothing open opens a fragment (:attr:`Step.implicit`);
  an unknown event type counts as a delta.
* Content is appended; a tool call's ``name`` is updated only when non-empty; the
  ``tool_call_id`` is overwritten; ``images`` are replaced (never appended) when
  non-empty, since one delta carries the whole set; the last ``stop_reason``
  given wins.
* ``stop`` removes the fragment, which then owes its complete message: the
  next message of its chain must be it. Whatever that next message is settles
  the debt; a run closed before it came gets the complete message from
  :meth:`OpenFragments.close_all`.

A producer names its segment ``Fragment(SegmentKind.TEXT)`` and streams it with
:meth:`Fragment.start`, :meth:`Fragment.delta` and :meth:`Fragment.finish`;
``Segment`` is the same class under the name producers think in.

:class:`Fragment` is one segment's state, and also builds its messages, so a
producer streaming a segment and a guard closing a leaked one write the same
shapes: the stop, the complete message (images included) and the synthetic
``start`` carrying the prefix that the live tail of ``GET /messages`` shows.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from omni_grpc.protocol import builders as b
from omni_grpc.vocabulary import EventType, StopReason
from omni_grpc_proto.omni.v1 import omni_pb2

Json = dict[str, Any]
# (origin chain, partial payload type, tool_call_id)
FragmentKey = tuple[tuple[str, ...], str, str]


class SegmentKind(enum.StrEnum):
    """What a segment streams, spelled as its complete message's payload type."""

    TEXT = "text"
    THINKING = "thinking"
    TOOL_CALL = "tool_call"
    TOOL_CALL_OUTPUT = "tool_call_output"

    @property
    def partial(self) -> str:
        """The payload type of its fragments (``partial_text``, ...)."""
        return _PARTIAL[self]

    @property
    def content_key(self) -> str:
        """The payload key the streamed content accumulates in."""
        return _CONTENT_KEY[self]

    @classmethod
    def of_partial(cls, kind: object) -> SegmentKind | None:
        """The segment kind of a ``partial_*`` payload type, else None."""
        return _BY_PARTIAL.get(kind) if isinstance(kind, str) else None


_PARTIAL = {k: f"partial_{k.value}" for k in SegmentKind}
_BY_PARTIAL = {partial: kind for kind, partial in _PARTIAL.items()}
_CONTENT_KEY = {
    SegmentKind.TEXT: "text",
    SegmentKind.THINKING: "thinking",
    SegmentKind.TOOL_CALL: "arguments",
    SegmentKind.TOOL_CALL_OUTPUT: "output",
}
PARTIAL_KINDS = frozenset(_BY_PARTIAL)
_EVENT_TYPES = {
    omni_pb2.EVENT_TYPE_START: EventType.START.value,
    omni_pb2.EVENT_TYPE_DELTA: EventType.DELTA.value,
    omni_pb2.EVENT_TYPE_STOP: EventType.STOP.value,
}
_STOP_REASONS = {omni_pb2.StopReason.Value(f"STOP_REASON_{r.name}"): r.value for r in StopReason}


@dataclass(eq=False)
class Fragment:
    """One segment: what has streamed so far, and the messages that carry it."""

    kind: SegmentKind
    name: str = ""
    tool_call_id: str = ""
    origin: tuple[str, ...] = ()
    chunks: list[str] = field(default_factory=list)
    images: list[str] = field(default_factory=list)
    stop_reason: str = StopReason.COMPLETED.value
    # Where it opened and stopped (line numbers, event seqs), for reports.
    opened_at: int | None = None
    stopped_at: int | None = None

    def __post_init__(self) -> None:
        self.kind = SegmentKind(self.kind)  # a producer may name it by its spelling
        self._content_key = _CONTENT_KEY[self.kind]  # read on every delta

    @property
    def content(self) -> str:
        return "".join(self.chunks)

    # ---- reading a stream ------------------------------------------------------

    def absorb(self, payload: Mapping[str, Any]) -> None:
        """Takes in one fragment payload (the reference's append rules)."""
        chunk = payload.get(self._content_key)
        if isinstance(chunk, str) and chunk:
            self.chunks.append(chunk)
        name = payload.get("name")
        if isinstance(name, str) and name:
            self.name = name
        call_id = payload.get("tool_call_id")
        if isinstance(call_id, str):
            self.tool_call_id = call_id
        images = payload.get("images")
        if images and isinstance(images, Sequence) and not isinstance(images, str):
            self.images = [str(i) for i in images]
        stop_reason = payload.get("stop_reason")
        if isinstance(stop_reason, str):
            self.stop_reason = stop_reason

    # ---- producing a stream ----------------------------------------------------

    def start(self) -> Json:
        """The empty ``start`` a producer opens the segment with."""
        return self.partial(EventType.START)

    def delta(self, chunk: str, images: Sequence[str] | None = None) -> Json:
        """Streams ``chunk`` (and, for a tool output, its whole image set)."""
        if chunk:
            self.chunks.append(chunk)
        if images:
            self.images = list(images)
        return self.partial(EventType.DELTA, chunk, images=images)

    def finish(
        self, stop_reason: str = StopReason.COMPLETED, fidelity: Mapping[str, Any] | None = None
    ) -> list[Json]:
        """Ends the segment: the ``stop`` and, right after it, the complete message."""
        self.stop_reason = str(stop_reason)
        return [self.partial(EventType.STOP), self.complete(fidelity=fidelity)]

    # ---- messages ----------------------------------------------------------------

    def partial(
        self,
        event_type: str,
        chunk: str = "",
        *,
        images: Sequence[str] | None = None,
        timestamp: str | None = None,
    ) -> Json:
        """A fragment message of this segment (its name, id, origin and stop_reason)."""
        sr, cid = self.stop_reason, self.tool_call_id
        if self.kind is SegmentKind.TEXT:
            msg = b.partial_text(event_type, chunk, stop_reason=sr, timestamp=timestamp)
        elif self.kind is SegmentKind.THINKING:
            msg = b.partial_thinking(event_type, chunk, stop_reason=sr, timestamp=timestamp)
        elif self.kind is SegmentKind.TOOL_CALL:
            msg = b.partial_tool_call(
                event_type, self.name, chunk, cid, stop_reason=sr, timestamp=timestamp
            )
        else:
            msg = b.partial_tool_call_output(
                event_type, chunk, cid, images=images, stop_reason=sr, timestamp=timestamp
            )
        return self._placed(msg)

    def complete(
        self,
        *,
        stop_reason: str | None = None,
        fidelity: Mapping[str, Any] | None = None,
        timestamp: str | None = None,
    ) -> Json:
        """The complete message the fragments add up to (images included)."""
        text, sr = self.content, str(stop_reason or self.stop_reason)
        if self.kind is SegmentKind.TEXT:
            msg = b.assistant_text(text, stop_reason=sr, fidelity=fidelity, timestamp=timestamp)
        elif self.kind is SegmentKind.THINKING:
            msg = b.thinking(text, stop_reason=sr, fidelity=fidelity, timestamp=timestamp)
        elif self.kind is SegmentKind.TOOL_CALL:
            msg = b.tool_call(
                self.name,
                text,
                self.tool_call_id,
                stop_reason=sr,
                fidelity=fidelity,
                timestamp=timestamp,
            )
        else:
            # The reference's toolCallOutput builder takes no fidelity.
            msg = b.tool_call_output(
                text, self.tool_call_id, images=self.images, stop_reason=sr, timestamp=timestamp
            )
        return self._placed(msg)

    def snapshot(self) -> Json:
        """A synthetic ``start`` carrying everything streamed so far: how the live
        tail of ``GET /messages`` shows an open fragment."""
        return self.partial(EventType.START, self.content, images=self.images or None)

    def _placed(self, msg: Json) -> Json:
        if self.origin:
            msg["origin"] = list(self.origin)
        return msg


# What a producer streams is a fragment it drives itself.
Segment = Fragment


class Step(NamedTuple):
    """What one fragment message did to the open set."""

    # The fragment the message went to (no longer open after a stop).
    fragment: Fragment
    event: str
    # The fragment a ``start`` on an open key finalized, if any.
    replaced: Fragment | None = None
    # A delta or stop arrived with nothing open, so it opened the fragment.
    implicit: bool = False

    @property
    def stopped(self) -> bool:
        return self.event == EventType.STOP


class OpenFragments:
    """The fragments opened and not yet stopped, in opening order."""

    def __init__(self) -> None:
        self._open: dict[FragmentKey, Fragment] = {}
        # Per origin chain: the stopped fragment whose complete message is next.
        self._owed: dict[tuple[str, ...], Fragment] = {}

    def __len__(self) -> int:
        return len(self._open)

    @property
    def open(self) -> bool:
        return bool(self._open)

    @property
    def unfinished(self) -> bool:
        """A fragment is open, or a stop still owes its complete message."""
        return bool(self._open or self._owed)

    def unfinished_in(self, origin: Sequence[str]) -> bool:
        """:attr:`unfinished`, for one origin chain."""
        chain = tuple(origin)
        return chain in self._owed or any(key[0] == chain for key in self._open)

    @property
    def fragments(self) -> list[Fragment]:
        return list(self._open.values())

    def push(
        self, payload: Mapping[str, Any], origin: Sequence[str] = (), *, at: int | None = None
    ) -> Step | None:
        """Applies one payload of any kind (so a stop's debt is settled by
        whatever follows it); None when it is not a fragment."""
        chain: tuple[str, ...] = origin if type(origin) is tuple else tuple(origin)
        if self._owed:
            self._owed.pop(chain, None)
        kind_name = payload.get("type")
        if not isinstance(kind_name, str):
            return None
        kind = _BY_PARTIAL.get(kind_name)
        if kind is None:
            return None
        call_id = payload.get("tool_call_id")
        key = (chain, kind_name, call_id if isinstance(call_id, str) else "")
        raw_event = payload.get("event_type")
        event = raw_event if isinstance(raw_event, str) else ""
        replaced = self._open.pop(key, None) if event == EventType.START else None
        fragment = self._open.get(key)
        implicit = fragment is None and event != EventType.START
        if fragment is None:
            fragment = self._open[key] = Fragment(kind, origin=chain, opened_at=at)
        fragment.absorb(payload)
        if event == EventType.STOP:
            del self._open[key]
            fragment.stopped_at = at
            self._owed[chain] = fragment
        return Step(fragment, event, replaced, implicit)

    def settle(self, origin: Sequence[str] = ()) -> Fragment | None:
        """Takes the fragment whose complete message the chain's next message must
        be (None when nothing is owed): for a caller that checks that message."""
        return self._owed.pop(tuple(origin), None)

    def push_message(self, msg: Mapping[str, Any] | omni_pb2.OmniMessage) -> Step | None:
        """:meth:`push` for a whole message, JSON or protobuf, with its origin."""
        if isinstance(msg, omni_pb2.OmniMessage):
            view = fragment_view(msg)
            if view is None:
                self._owed.pop(tuple(msg.origin), None)
                return None
            return self.push(view, tuple(msg.origin))
        payload = msg.get("payload")
        if type(payload) is not dict and not isinstance(payload, Mapping):
            return None
        origin = msg.get("origin")
        chain = tuple(str(o) for o in origin) if isinstance(origin, list) and origin else ()
        return self.push(payload, chain)

    def take_all(self) -> list[Fragment]:
        """Removes and returns every open fragment, in opening order."""
        fragments = list(self._open.values())
        self._open.clear()
        return fragments

    def close_all(self, stop_reason: str, *, origin: Sequence[str] | None = None) -> list[Json]:
        """What ends every segment still unfinished, and forgets them: first the
        complete message a stop still owes (it must come next, and keeps the
        stop's own stop_reason), then the ``stop`` and complete message of each
        open fragment, in opening order, with ``stop_reason``. ``origin``
        limits this to one chain."""
        out: list[Json] = []
        for chain, owed in list(self._owed.items()):
            if origin is None or chain == tuple(origin):
                del self._owed[chain]
                out.append(owed.complete())
        for key, fragment in list(self._open.items()):
            if origin is not None and fragment.origin != tuple(origin):
                continue
            del self._open[key]
            out.extend(fragment.finish(stop_reason))
        return out

    def snapshots(self) -> list[Json]:
        """Each open fragment as a synthetic ``start`` carrying its prefix."""
        return [fragment.snapshot() for fragment in self._open.values()]


def chunked(text: str, size: int) -> list[str]:
    """``text`` in pieces of at most ``size`` characters (one empty piece for "")."""
    if size <= 0 or len(text) <= size:
        return [text]
    return [text[i : i + size] for i in range(0, len(text), size)]


# The string fields each fragment arm has, besides event_type and stop_reason.
_VIEW_FIELDS = {
    SegmentKind.TEXT: ("text",),
    SegmentKind.THINKING: ("thinking",),
    SegmentKind.TOOL_CALL: ("name", "arguments", "tool_call_id"),
    SegmentKind.TOOL_CALL_OUTPUT: ("output", "tool_call_id"),
}


def fragment_view(msg: omni_pb2.OmniMessage) -> Json | None:
    """The fields of a protobuf fragment the state machine reads, as JSON; None
    when ``msg`` is not a fragment. Cheaper than a full conversion on the
    per-delta path."""
    arm = msg.WhichOneof("payload")
    kind = _BY_PARTIAL.get(arm) if arm is not None else None
    if kind is None:
        return None
    part = getattr(msg, arm)
    view: Json = {"type": arm, "event_type": _EVENT_TYPES.get(part.event_type, "")}
    for name in _VIEW_FIELDS[kind]:
        view[name] = getattr(part, name)
    if kind is SegmentKind.TOOL_CALL_OUTPUT and part.images:
        view["images"] = list(part.images)
    stop_reason = _STOP_REASONS.get(part.stop_reason)
    if stop_reason is not None:
        view["stop_reason"] = stop_reason
    return view


def live_fragments(messages: Iterable[Mapping[str, Any] | omni_pb2.OmniMessage]) -> list[Json]:
    """Folds a task's stream (its messages in order, any other items skipped by
    the caller) into the fragments still open at its end, each as a synthetic
    ``start`` carrying its prefix: the ``fragments`` of the reference live tail.

    Built from messages alone, so any process that can read the session's log
    can build it."""
    tracker = OpenFragments()
    for msg in messages:
        tracker.push_message(msg)
    return tracker.snapshots()
