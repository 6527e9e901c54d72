"""PartialAggregator against the reference output in the corpus."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from omni_grpc import protocol as p

CORPUS = Path(__file__).parent / "conformance"


def dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def load(name: str) -> list[dict[str, Any]]:
    text = (CORPUS / name).read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line]


def fixture_clock(start_ms: int = 0) -> p.Clock:
    """The generator's clock: 2026-08-22T02:16:00.000Z, one millisecond per call."""
    ticks: Iterator[int] = iter(range(start_ms, 10_000))

    def clock() -> str:
        return f"2026-08-22T02:16:00.{next(ticks):03d}Z"

    return clock


def test_aggregated_from_partials_is_byte_identical() -> None:
    partials = [m for m in load("stream_basic_tool_turn.jsonl") if p.is_partial_payload(m)]
    got = [dumps(m) for m in p.aggregate_all(partials, clock=fixture_clock())]
    expected = (CORPUS / "aggregated_from_partials.jsonl").read_text(encoding="utf-8").splitlines()
    assert got == expected


STREAMS_WITH_PARTIALS = sorted(
    f.name for f in CORPUS.glob("stream_*.jsonl") if '"partial_' in f.read_text(encoding="utf-8")
)


def test_most_streams_have_partials() -> None:
    assert len(STREAMS_WITH_PARTIALS) >= 4


@pytest.mark.parametrize("name", STREAMS_WITH_PARTIALS, ids=lambda n: n)
def test_each_stop_yields_the_following_complete_message(name: str) -> None:
    """The discipline: the complete message right after a stop equals the joined
    fragments, apart from the new timestamp and what partials never carry."""
    stream = load(name)
    aggregator = p.PartialAggregator(clock=lambda: "T")
    checked = 0
    for i, msg in enumerate(stream):
        out = aggregator.push(msg)
        if not p.is_partial_payload(msg):
            assert out == [msg]
            continue
        if msg["payload"]["event_type"] != "stop":
            assert out == []
            continue
        (joined,) = out
        following = dict(stream[i + 1]["payload"])
        following.pop("fidelity", None)
        following.pop("sender", None)
        assert joined["payload"] == following
        assert joined["timestamp"] == "T"
        checked += 1
    assert aggregator.open_count == 0
    assert aggregator.flush() == []
    assert checked > 0


def test_start_on_an_open_key_finalizes_the_old_fragment() -> None:
    agg = p.PartialAggregator(clock=lambda: "T")
    assert agg.push(p.partial_text("start", "a", timestamp="x")) == []
    assert agg.push(p.partial_text("delta", "b", timestamp="x")) == []
    (first,) = agg.push(p.partial_text("start", "c", timestamp="x"))
    assert first == p.assistant_text("ab", timestamp="T")
    (second,) = agg.push(p.partial_text("stop", "", timestamp="x"))
    assert second["payload"]["text"] == "c"


def test_lenient_delta_without_start_and_flush_order() -> None:
    agg = p.PartialAggregator(clock=lambda: "T")
    agg.push(p.partial_tool_call("delta", "f", '{"a"', "c1", timestamp="x"))
    agg.push(p.partial_thinking("delta", "hm", timestamp="x"))
    agg.push(p.partial_tool_call("delta", "", ":1}", "c1", stop_reason="malformed", timestamp="x"))
    flushed = agg.flush()
    assert [m["payload"]["type"] for m in flushed] == ["tool_call", "thinking"]
    call = flushed[0]["payload"]
    # The empty name of the second fragment does not erase the first.
    assert (call["name"], call["arguments"], call["stop_reason"]) == ("f", '{"a":1}', "malformed")
    assert agg.open_count == 0


def test_images_are_replaced_and_tool_call_id_overwritten() -> None:
    agg = p.PartialAggregator(clock=lambda: "T")
    agg.push(p.partial_tool_call_output("start", "", "c", timestamp="x"))
    agg.push(p.partial_tool_call_output("delta", "o", "c", images=["data:a"], timestamp="x"))
    agg.push(p.partial_tool_call_output("delta", "k", "c", images=["data:b"], timestamp="x"))
    agg.push(p.partial_tool_call_output("delta", "", "c", timestamp="x"))
    (out,) = agg.push(p.partial_tool_call_output("stop", "", "c", timestamp="x"))
    assert out["payload"]["images"] == ["data:b"]
    assert out["payload"]["output"] == "ok"


def test_origin_is_not_part_of_the_key() -> None:
    """Reference behaviour: two origins' partial_text collide on one fragment."""
    agg = p.PartialAggregator(clock=lambda: "T")
    agg.push(p.with_origin(p.partial_text("start", "a", timestamp="x"), "child"))
    (joined,) = agg.push(p.partial_text("stop", "b", timestamp="x"))
    assert joined["payload"]["text"] == "ab"
    assert "origin" not in joined
