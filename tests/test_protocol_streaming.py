"""The one streaming state machine, tested once for all its users: the
aggregator, the validator, the hub's run guard and live tail, the engines.

Property tests generate fragment sequences of two classes: arbitrary ones
(any kind, event type, id, content, images, stop_reason, in any order), which
every reader must handle by the reference rules; and disciplined ones, as a
producer streams them, cut at any point, which the run guard must close into a
stream every reader accepts.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from omni_grpc.convert import message_from_dict
from omni_grpc.protocol import builders as b
from omni_grpc.protocol.aggregator import PartialAggregator, aggregate_all
from omni_grpc.protocol.streaming import (
    Fragment,
    OpenFragments,
    SegmentKind,
    chunked,
    live_fragments,
)
from omni_grpc.runtime.run_guard import RunGuard
from omni_grpc.trace.validate import TraceValidator
from omni_grpc.vocabulary import StopReason

Json = dict[str, Any]
# Generation is slow on a loaded machine; the examples count, not their speed.
SLOW_OK = [HealthCheck.too_slow]
T0 = "2026-01-01T00:00:00.000Z"
FRAGMENT_CODES = {
    "restart",
    "no-start",
    "bad-event-type",
    "unclosed",
    "missing-complete",
    "delta-mismatch",
}
PARTIALS = [k.partial for k in SegmentKind]
CONTENT = {k.partial: k.content_key for k in SegmentKind}


def clock() -> str:
    return T0


def untimed(msg: Mapping[str, Any]) -> Json:
    return {k: v for k, v in msg.items() if k != "timestamp"}


# ---- an independent model of the reference aggregator (aggregate.ts) ---------------


def reference_aggregate(messages: list[Json]) -> list[Json]:
    """Written from the protocol digest alone, not from our module."""
    open_: dict[str, Json] = {}
    out: list[Json] = []

    def finalize(f: Json) -> Json:
        kind, text, sr = f["type"], f["buffer"], f["stop_reason"]
        if kind == "partial_text":
            return b.assistant_text(text, stop_reason=sr, timestamp=T0)
        if kind == "partial_thinking":
            return b.thinking(text, stop_reason=sr, timestamp=T0)
        if kind == "partial_tool_call":
            return b.tool_call(f["name"], text, f["tool_call_id"], stop_reason=sr, timestamp=T0)
        return b.tool_call_output(
            text, f["tool_call_id"], images=f["images"], stop_reason=sr, timestamp=T0
        )

    for msg in messages:
        p = msg["payload"]
        if msg["type"] != "model_msg" or p.get("type") not in PARTIALS:
            out.append(msg)
            continue
        cid = p.get("tool_call_id")
        key = f"{p['type']}::{cid if isinstance(cid, str) else ''}"
        if p.get("event_type") == "start" and key in open_:
            out.append(finalize(open_.pop(key)))
        if key not in open_:
            open_[key] = {"type": p["type"], "buffer": "", "name": "", "tool_call_id": "",
                          "images": [], "stop_reason": "completed"}  # fmt: skip
        f = open_[key]
        content = p.get(CONTENT[p["type"]])
        if isinstance(content, str):
            f["buffer"] += content
        if isinstance(p.get("name"), str) and p["name"]:
            f["name"] = p["name"]
        if isinstance(cid, str):
            f["tool_call_id"] = cid
        if isinstance(p.get("images"), list) and p["images"]:
            f["images"] = list(p["images"])
        if isinstance(p.get("stop_reason"), str):
            f["stop_reason"] = p["stop_reason"]
        if p.get("event_type") == "stop":
            out.append(finalize(open_.pop(key)))
    out.extend(finalize(f) for f in open_.values())
    return out


# ---- strategies ---------------------------------------------------------------------

texts = st.text(max_size=6)
images = st.lists(st.sampled_from(["https://x/1.png", "https://x/2.png", "data:,3"]), max_size=2)
stop_reasons = st.sampled_from(list(StopReason))


@st.composite
def arbitrary_partial(draw: st.DrawFn) -> Json:
    kind = draw(st.sampled_from(PARTIALS))
    payload: Json = {
        "type": kind,
        "role": "user" if kind == "partial_tool_call_output" else "assistant",
        "event_type": draw(st.sampled_from(["start", "delta", "stop", "restart", ""])),
        CONTENT[kind]: draw(texts),
    }
    if kind in ("partial_tool_call", "partial_tool_call_output"):
        payload["tool_call_id"] = draw(st.sampled_from(["", "a", "b"]))
    if kind == "partial_tool_call":
        payload["name"] = draw(st.sampled_from(["", "read", "write"]))
    if kind == "partial_tool_call_output" and draw(st.booleans()):
        payload["images"] = draw(images)
    if draw(st.booleans()):
        payload["stop_reason"] = draw(stop_reasons).value
    return {"timestamp": T0, "type": "model_msg", "payload": payload}


arbitrary_streams = st.lists(
    st.one_of(arbitrary_partial(), st.just(b.request_begin(timestamp=T0))), max_size=25
)


@st.composite
def disciplined_stream(draw: st.DrawFn) -> list[Json]:
    """What well-behaved producers stream: segments (tool outputs may interleave)
    and events, each segment's stop followed at once by its complete message."""
    ids = (f"call_{i}" for i in itertools.count())
    open_: list[Fragment] = []
    out: list[Json] = []
    for _ in range(draw(st.integers(0, 30))):
        action = draw(st.sampled_from(["open", "delta", "delta", "finish", "event"]))
        if action == "event":
            out.append(b.request_begin(timestamp=T0))
        elif action == "open" or not open_:
            kind = draw(st.sampled_from(list(SegmentKind)))
            streamed_ids = kind in (SegmentKind.TOOL_CALL, SegmentKind.TOOL_CALL_OUTPUT)
            if not streamed_ids and any(f.kind is kind for f in open_):
                continue  # one text and one thinking at a time: their key has no id
            name = draw(st.sampled_from(["read", "write"])) if kind is SegmentKind.TOOL_CALL else ""
            fragment = Fragment(kind, name=name, tool_call_id=next(ids) if streamed_ids else "")
            open_.append(fragment)
            out.append(fragment.start())
        elif action == "delta":
            fragment = draw(st.sampled_from(open_))
            shown = draw(images) if fragment.kind is SegmentKind.TOOL_CALL_OUTPUT else None
            out.append(fragment.delta(draw(texts), shown or None))
        else:
            fragment = draw(st.sampled_from(open_))
            open_.remove(fragment)
            out.extend(fragment.finish(draw(stop_reasons)))
    for fragment in open_:  # a producer never leaks a fragment
        out.extend(fragment.finish(draw(stop_reasons)))
    return out


def fragment_issues(messages: list[Json]) -> list[tuple[int, str, str]]:
    validator = TraceValidator(trace=False)
    issues = [i for n, m in enumerate(messages, 1) for i in validator.check(n, m)]
    issues += validator.finish()
    return [(i.line, i.code, i.message) for i in issues if i.code in FRAGMENT_CODES]


def joins_match_completes(msgs: list[Json]) -> bool:
    """At every stop, the aggregator's join of the segment is the complete
    message that follows it (timestamps aside); at least one stop was seen when
    the stream has any."""
    aggregator = PartialAggregator(clock)
    for i, msg in enumerate(msgs):
        out = aggregator.push(msg)
        if msg["payload"]["type"] in PARTIALS and msg["payload"]["event_type"] == "stop":
            (joined,) = out
            assert untimed(joined) == untimed(msgs[i + 1]), i
    return aggregator.open_count == 0


# ---- the reference rules, for any sequence ------------------------------------------


@settings(max_examples=300, deadline=None, suppress_health_check=SLOW_OK)
@given(arbitrary_streams)
def test_the_aggregator_follows_the_reference_rules_on_any_sequence(msgs: list[Json]) -> None:
    assert aggregate_all(msgs, clock=clock) == reference_aggregate(msgs)


@settings(max_examples=200, deadline=None, suppress_health_check=SLOW_OK)
@given(arbitrary_streams)
def test_every_user_holds_the_same_open_fragments(msgs: list[Json]) -> None:
    """Aggregator, run guard and tracker agree after every message: a second
    start finalizes the open fragment for all of them, none replaces it silently."""
    aggregator, guard, tracker = PartialAggregator(clock), RunGuard(), OpenFragments()
    for msg in msgs:
        aggregator.push(msg)
        guard.observe(msg)
        tracker.push_message(msg)
        snapshots = tracker.snapshots()
        assert aggregator.open_count == len(tracker) == len(guard.open)
        assert [untimed(s) for s in guard.fragments()] == [untimed(s) for s in snapshots]
    # What the guard would close is what the aggregator would still flush.
    closing = guard.closing_messages(aborted=True, reason="stop", error=None)
    # (A complete message a stop still owes comes first, with no stop before it.)
    closed = [m for prev, m in itertools.pairwise(closing) if prev["payload"]["type"] in PARTIALS]
    flushed = aggregator.flush()
    assert [untimed(m)["payload"]["type"] for m in closed] == [
        untimed(m)["payload"]["type"] for m in flushed
    ]
    for got, want in zip(closed, flushed, strict=True):
        # The guard stops them as aborted; everything else is the fragment's.
        want["payload"]["stop_reason"] = "aborted"
        assert untimed(got) == untimed(want)


# ---- disciplined producers, cut anywhere -------------------------------------------------


@settings(max_examples=200, deadline=None, suppress_health_check=SLOW_OK)
@given(disciplined_stream())
def test_producers_stream_what_every_reader_accepts(msgs: list[Json]) -> None:
    assert fragment_issues(msgs) == []
    assert joins_match_completes(msgs)


@settings(max_examples=300, deadline=None, suppress_health_check=SLOW_OK)
@given(disciplined_stream(), st.data(), st.booleans())
def test_the_guard_closes_any_cut_into_a_well_formed_stream(
    msgs: list[Json], data: st.DataObject, aborted: bool
) -> None:
    cut = msgs[: data.draw(st.integers(0, len(msgs)))]
    guard = RunGuard()
    for msg in cut:
        guard.observe(msg)
    closed = cut + guard.closing_messages(aborted=aborted, reason="gone", error=None)
    assert fragment_issues(closed) == []
    assert joins_match_completes(closed)  # images included
    assert closed[-1]["payload"]["type"] == "abort"


@settings(max_examples=300, deadline=None, suppress_health_check=SLOW_OK)
@given(disciplined_stream(), st.data())
def test_the_live_tail_paints_every_open_fragment_exactly(
    msgs: list[Json], data: st.DataObject
) -> None:
    """The reference client pattern: paint the tail's fragments, then apply the
    partials after the cursor; each segment then reads as its complete message."""
    at = data.draw(st.integers(0, len(msgs)))
    tail = live_fragments(msgs[:at])
    painted: dict[tuple[str, str], str] = {}
    for snap in tail:
        p = snap["payload"]
        assert p["event_type"] == "start"
        painted[(p["type"], p.get("tool_call_id", ""))] = p[CONTENT[p["type"]]]
    for i, msg in enumerate(msgs[at:], at):
        p = msg["payload"]
        key = (p["type"], p.get("tool_call_id", ""))
        if key not in painted:
            continue
        if p["event_type"] == "stop":
            complete = msgs[i + 1]["payload"]
            assert painted.pop(key) == complete[CONTENT[p["type"]]]
        else:
            painted[key] += p[CONTENT[p["type"]]]
    assert painted == {}  # every painted fragment was stopped later


# ---- the rules by example ------------------------------------------------------------------


def out_partial(event: str, output: str, imgs: list[str] | None = None) -> Json:
    return b.partial_tool_call_output(event, output, "c1", images=imgs, timestamp=T0)


def test_closing_a_tool_output_keeps_its_images() -> None:
    guard = RunGuard()
    for msg in (out_partial("start", ""), out_partial("delta", "png", ["https://x/1.png"])):
        guard.observe(msg)
    stop, complete, abort = guard.closing_messages(aborted=False, reason="crash", error="x")
    assert stop["payload"]["event_type"] == "stop" and "images" not in stop["payload"]
    assert complete["payload"] == {
        "type": "tool_call_output",
        "role": "user",
        "output": "png",
        "images": ["https://x/1.png"],
        "tool_call_id": "c1",
        "stop_reason": "failed",
    }
    assert abort["payload"] == {"type": "abort", "reason": "crash"}


def test_a_second_start_finalizes_the_open_fragment_for_every_reader() -> None:
    first, second = (
        b.partial_text("start", "one", timestamp=T0),
        b.partial_text("start", "two", timestamp=T0),
    )
    assert [m["payload"]["text"] for m in aggregate_all([first, second], clock=clock)] == [
        "one",
        "two",
    ]
    guard = RunGuard()
    guard.observe(first)
    guard.observe(second)
    assert [f["payload"]["text"] for f in guard.fragments()] == ["two"]
    closing = guard.closing_messages(aborted=True, reason="r", error=None)
    assert [m["payload"].get("text") for m in closing[:2]] == ["", "two"]
    codes = [code for _, code, _ in fragment_issues([first, second])]
    assert codes == ["restart", "unclosed"]


def test_what_counts_as_unfinished() -> None:
    guard = RunGuard()
    assert not guard.unfinished
    guard.observe(b.with_origin(b.partial_text("start", "x", timestamp=T0), "child"))
    assert not guard.unfinished  # a child's stream is its engine's business
    guard.observe(b.request_begin(timestamp=T0))
    assert guard.unfinished
    guard.observe(b.request_end("completed", timestamp=T0))
    assert not guard.unfinished
    guard.observe(b.partial_text("stop", timestamp=T0))
    assert guard.unfinished  # the stop owes its complete message
    guard.observe(b.assistant_text("", timestamp=T0))
    assert not guard.unfinished


def test_the_live_tail_keys_by_origin_and_keeps_it() -> None:
    main = b.partial_text("start", "parent", timestamp=T0)
    child = b.with_origin(b.partial_text("start", "child", timestamp=T0), "sub1")
    more = b.with_origin(b.partial_text("delta", "!", timestamp=T0), "sub1")
    tail = live_fragments([main, child, more])
    assert [(t.get("origin"), t["payload"]["text"]) for t in tail] == [
        (None, "parent"),
        (["sub1"], "child!"),
    ]
    # The guard closes only the run's own chain.
    guard = RunGuard()
    for msg in (main, child, more):
        guard.observe(msg)
    closing = guard.closing_messages(aborted=True, reason="r", error=None)
    assert all("origin" not in m for m in closing)
    assert [m["payload"].get("text") for m in closing] == ["", "parent", None]


def test_segments_and_chunks() -> None:
    segment = Fragment(SegmentKind.TOOL_CALL, name="read", tool_call_id="c9")
    streamed = [segment.start()] + [segment.delta(p) for p in chunked('{"path":"a"}', 4)]
    stop, complete = segment.finish()
    assert [m["payload"]["arguments"] for m in streamed] == ["", '{"pa', 'th":', '"a"}']
    assert stop["payload"]["name"] == "read" and complete["payload"]["arguments"] == (
        '{"path":"a"}'
    )
    assert chunked("", 3) == [""] and chunked("abc", 0) == ["abc"]
    assert SegmentKind.of_partial("partial_thinking") is SegmentKind.THINKING
    assert SegmentKind.of_partial(["not", "hashable"]) is None
    assert Fragment("text").kind is SegmentKind.TEXT  # type: ignore[arg-type]


COMPLETES = [k.value for k in SegmentKind]


def carries_nothing(msg: Json) -> bool:
    """A delta without content: losing it changes no reader's result."""
    p = msg["payload"]
    return p.get("event_type") == "delta" and not p[CONTENT[p["type"]]]


@settings(max_examples=300, deadline=None, suppress_health_check=SLOW_OK)
@given(disciplined_stream(), st.data())
def test_the_validator_reports_any_lost_piece_of_a_segment(
    msgs: list[Json], data: st.DataObject
) -> None:
    """Losing a start, a stop, a complete message or a delta with content breaks
    the discipline, and the validator says so."""
    pieces = [
        i
        for i, m in enumerate(msgs)
        if m["payload"]["type"] in COMPLETES
        or (m["payload"]["type"] in PARTIALS and not carries_nothing(m))
    ]
    if not pieces:
        return
    lost = data.draw(st.sampled_from(pieces))
    assert fragment_issues(msgs[:lost] + msgs[lost + 1 :]) != []


@settings(max_examples=200, deadline=None, suppress_health_check=SLOW_OK)
@given(disciplined_stream(), st.data(), stop_reasons)
def test_protobuf_and_json_streams_fold_alike(
    msgs: list[Json], data: st.DataObject, closing_reason: StopReason
) -> None:
    """The hub's log holds protobuf messages, engines yield JSON: both paths
    through the state machine give the same tail and the same closing."""
    cut = msgs[: data.draw(st.integers(0, len(msgs)))]
    as_json, as_proto = OpenFragments(), OpenFragments()
    for msg in cut:
        as_json.push_message(msg)
        as_proto.push_message(message_from_dict(msg))
    assert [untimed(m) for m in as_proto.snapshots()] == [untimed(m) for m in as_json.snapshots()]
    assert as_proto.unfinished == as_json.unfinished
    assert [untimed(m) for m in as_proto.close_all(closing_reason)] == [
        untimed(m) for m in as_json.close_all(closing_reason)
    ]
    assert [untimed(m) for m in live_fragments(message_from_dict(m) for m in cut)] == [
        untimed(m) for m in live_fragments(cut)
    ]
