"""The replay engine: recorded traces served as live runs."""

from __future__ import annotations

import asyncio
import itertools
from datetime import datetime
from pathlib import Path

import pytest
from fakes.harness import Approver, collect, kinds, payloads

from omni_grpc.convert import message_from_dict, message_to_dict, parse_message
from omni_grpc.engines import replay
from omni_grpc.engines.base import AbortSignal
from omni_grpc.engines.replay import create
from omni_grpc.protocol import builders as b
from omni_grpc.trace import write_binpb

CONFORMANCE = Path(__file__).parent / "conformance"
BASIC_TRACE = CONFORMANCE / "trace_basic_tool_turn_001.jsonl"
BASIC_STREAM = CONFORMANCE / "stream_basic_tool_turn.jsonl"


def lines(path: Path) -> list[dict[str, object]]:
    return [message_to_dict(parse_message(line)) for line in path.read_bytes().splitlines()]


def without_deltas(messages: list[dict[str, object]]) -> list[dict[str, object]]:
    """Payloads minus delta fragments (whose count depends on chunking)."""
    return [
        m["payload"]  # type: ignore[misc]
        for m in messages
        if m["payload"].get("event_type") != "delta"  # type: ignore[union-attr]
    ]


async def test_a_trace_replays_as_the_stream_the_reference_produced(tmp_path: Path) -> None:
    engine = create(f"replay:{BASIC_TRACE}", delay_ms="0", chunk="7")
    out = await collect(engine, [b.user_text("anything")], workspace=tmp_path)

    # Same messages, in the same order, as the reference's own live stream of that run.
    assert without_deltas(out) == without_deltas(lines(BASIC_STREAM))
    # Each synthesized segment's deltas add up to its complete message, chunked by 7.
    thinking = [p for p in payloads(out, "partial_thinking") if p["event_type"] == "delta"]
    assert "".join(p["thinking"] for p in thinking) == payloads(out, "thinking")[0]["thinking"]
    assert max(len(p["thinking"]) for p in thinking) == 7
    # Fidelity passes unchanged; timestamps are new.
    assert payloads(out, "thinking")[0]["fidelity"] == {"signature": "EqQBCkYIBxgCKkB3xZ=="}
    assert all(not m["timestamp"].startswith("2026-08-22") for m in out)


async def test_binpb_recordings_replay_the_same(tmp_path: Path) -> None:
    binpb = tmp_path / "basic.binpb"
    with binpb.open("wb") as sink:
        write_binpb([parse_message(line) for line in BASIC_TRACE.read_bytes().splitlines()], sink)
    from_jsonl = await collect(
        create(f"replay:{BASIC_TRACE}", delay_ms="0"), [], workspace=tmp_path
    )
    from_binpb = await collect(create(f"replay:{binpb}", delay_ms="0"), [], workspace=tmp_path)
    assert [m["payload"] for m in from_binpb] == [m["payload"] for m in from_jsonl]


async def test_a_recorded_stream_is_played_as_it_is(tmp_path: Path) -> None:
    engine = create(f"replay:{BASIC_STREAM}", delay_ms="0")
    out = await collect(engine, [b.user_text("go")], workspace=tmp_path)
    assert [m["payload"] for m in out] == [m["payload"] for m in lines(BASIC_STREAM)]


async def test_each_run_plays_the_next_recorded_task(tmp_path: Path) -> None:
    engine = create(f"replay:{CONFORMANCE / 'trace_retry_auth_abort_001.jsonl'}", delay_ms="0")
    endings = []
    trace = tmp_path / "s1.jsonl"
    for _ in range(4):
        # The cursor is the session's (its trace), not this engine's memory.
        out = await collect(
            engine, [b.user_text("x")], workspace=tmp_path, session_id="s1",
            trace_path=trace, record=True,
        )  # fmt: skip
        endings.append([p["status"] for p in payloads(out, "request_end")])
    assert endings == [
        ["timeout", "failed", "completed"],
        ["auth"],
        ["aborted"],
        ["timeout", "failed", "completed"],  # cycles
    ]
    # Sessions have their own cursor; turns=all plays everything in one run.
    other = await collect(
        engine, [b.user_text("x")], workspace=tmp_path, session_id="s2",
        trace_path=tmp_path / "s2.jsonl", record=True,
    )  # fmt: skip
    assert [p["status"] for p in payloads(other, "request_end")] == endings[0]
    everything = create(f"replay:{CONFORMANCE / 'trace_retry_auth_abort_001.jsonl'}",
                        delay_ms="0", turns="all")  # fmt: skip
    out = await collect(everything, [b.user_text("x")], workspace=tmp_path)
    assert len(payloads(out, "request_end")) == 5


async def test_live_approvals_replace_the_recorded_ones(tmp_path: Path) -> None:
    engine = create(f"replay:{BASIC_TRACE}", delay_ms="0")
    approver = Approver(decisions={"call_0": "deny"})
    out = await collect(engine, [b.user_text("x")], workspace=tmp_path, approve=approver)

    assert [c["payload"]["tool_call_id"] for c in approver.calls] == ["call_0"]
    assert payloads(out, "approval_decision") == [
        {"type": "approval_decision", "decision": "deny", "tool_call_id": "call_0"}
    ]
    assert [(p["output"], p["stop_reason"]) for p in payloads(out, "tool_call_output")] == [
        ("Tool call denied by user.", "aborted")
    ]
    assert "partial_tool_call_output:start" not in kinds(out)


async def test_the_approval_asks_about_the_tool_call_exactly_as_streamed(tmp_path: Path) -> None:
    """The streamed tool_call is restamped; the copy put up for approval must
    be the same message, timestamp included (as the demo engine's is)."""
    engine = create(f"replay:{BASIC_TRACE}", delay_ms="0")
    approver = Approver()
    out = await collect(engine, [b.user_text("x")], workspace=tmp_path, approve=approver)
    streamed = [m for m in out if m["payload"].get("type") == "tool_call"]
    assert approver.calls == streamed and len(streamed) == 1
    recorded = [m for m in lines(BASIC_TRACE) if m["payload"].get("type") == "tool_call"]  # type: ignore[union-attr]
    assert streamed[0]["timestamp"] != recorded[0]["timestamp"]  # played now, not then


async def test_recorded_approvals_skip_the_callback(tmp_path: Path) -> None:
    engine = create(f"replay:{BASIC_TRACE}", delay_ms="0", approvals="recorded")
    approver = Approver(decisions={"call_0": "deny"})
    out = await collect(engine, [b.user_text("x")], workspace=tmp_path, approve=approver)
    assert approver.calls == []
    assert payloads(out, "approval_decision")[0]["decision"] == "allow"


async def test_abort_mid_segment_closes_it_and_ends_the_run(tmp_path: Path) -> None:
    engine = create(f"replay:{BASIC_TRACE}", delay_ms="5", chunk="3")
    abort = AbortSignal()
    seen = itertools.count()

    def on_message(msg: dict[str, object]) -> None:
        if msg["payload"].get("event_type") == "delta" and next(seen) == 2:  # type: ignore[union-attr]
            abort.set("stop now")

    out = await collect(
        engine, [b.user_text("x")], workspace=tmp_path, abort=abort, on_message=on_message
    )
    assert kinds(out)[-4:] == ["partial_thinking:stop", "thinking", "request_end", "abort"]
    thinking = payloads(out, "thinking")[0]
    assert thinking["stop_reason"] == "aborted"
    assert thinking["thinking"] == "The user "  # the three deltas streamed before the abort
    assert payloads(out, "request_end") == [{"type": "request_end", "status": "aborted"}]
    assert out[-1]["payload"] == {"type": "abort", "reason": "stop now"}


async def test_pacing_is_configurable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The pauses the engine asks for, recorded instead of slept: what pacing
    # means is the waits, and counting them does not depend on the clock.
    asked: list[float] = []

    async def recorded_sleep(_player: object, ms: float) -> bool:
        asked.append(ms)
        return True

    monkeypatch.setattr(replay._Player, "_sleep", recorded_sleep)

    out = await collect(create(f"replay:{BASIC_TRACE}", delay_ms="0"), [], workspace=tmp_path)
    assert asked and set(asked) == {0}
    # A pause comes before each recorded message and each synthesized delta (the
    # live approval_decision replaces a recorded one, unpaused).
    unpaused = (":start", ":stop", "approval_decision")
    pauses = len(out) - sum(k.endswith(unpaused) for k in kinds(out))

    asked.clear()
    await collect(create(f"replay:{BASIC_TRACE}", delay_ms="10"), [], workspace=tmp_path)
    assert asked == [10.0] * pauses

    # Recorded timing: the gaps between the trace's messages, scaled by speed.
    asked.clear()
    recorded = create(f"replay:{BASIC_TRACE}", delay_ms="0", timing="recorded", speed="20")
    await collect(recorded, [], workspace=tmp_path)
    messages = [parse_message(line) for line in BASIC_TRACE.read_bytes().splitlines()]
    # Replayed: everything after the session_meta and the user's input.
    played = [m for m in messages[1:] if m.WhichOneof("payload") != "text" or m.text.role != 1]
    stamps = [datetime.fromisoformat(m.timestamp.replace("Z", "+00:00")) for m in played]
    span_ms = (stamps[-1] - stamps[0]).total_seconds() * 1000
    assert sum(asked) == pytest.approx(span_ms / 20)
    assert 0 < sum(asked) < span_ms


def test_session_meta_keeps_the_recorded_model(tmp_path: Path) -> None:
    meta = create(f"replay:{BASIC_TRACE}").session_meta("s-new", tmp_path)
    assert (meta["session_id"], meta["provider"], meta["model_id"]) == (
        "s-new", "deepseek", "deepseek-v4-pro",
    )  # fmt: skip
    assert meta["workspace"] == str(tmp_path)


@pytest.mark.parametrize(
    ("spec", "options", "message"),
    [
        ("replay:", {}, "name the recording"),
        ("replay:/no/such.jsonl", {}, "no such file"),
        ("replay:trace.txt", {}, "use a .jsonl or .binpb trace"),
        (f"replay:{BASIC_TRACE}", {"pace": "1"}, "unknown option(s) pace"),
        (f"replay:{BASIC_TRACE}", {"turns": "some"}, "turns='some': use one of next, all"),
        (f"replay:{BASIC_TRACE}", {"chunk": "0"}, "chunk='0' is out of range"),
        (f"replay:{BASIC_TRACE}", {"delay_ms": "fast"}, "delay_ms='fast' is not a number"),
    ],
)
def test_bad_specs_are_refused(spec: str, options: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=__import__("re").escape(message)):
        create(spec, **options)


def test_an_empty_recording_is_refused(tmp_path: Path) -> None:
    empty = tmp_path / "only_meta.jsonl"
    meta = b.session_meta(b.session_meta_payload("s", "p", "m", 1, "", "", "/w"))
    empty.write_bytes(__import__("omni_grpc.convert").convert.serialize_message(
        message_from_dict(meta)) + b"\n")  # fmt: skip
    with pytest.raises(ValueError, match="nothing to replay"):
        create(f"replay:{empty}")


async def test_many_concurrent_replays(tmp_path: Path) -> None:
    engine = create(f"replay:{BASIC_TRACE}", delay_ms="1")
    runs = [collect(engine, [], workspace=tmp_path, session_id=f"s{i}") for i in range(50)]
    results = await asyncio.gather(*runs)
    assert {len(r) for r in results} == {len(results[0])}


async def test_a_task_played_again_gets_fresh_tool_call_ids(tmp_path: Path) -> None:
    """A resumed trace pairs outputs by id: playing a recorded task a second time
    in one session (or after a restart, seen through the trace) renames its ids."""
    engine = create(f"replay:{BASIC_TRACE}", delay_ms="0", turns="all")
    recorded = tmp_path / "recorded.jsonl"  # the session's trace, as the hub records it
    first = await collect(
        engine, [b.user_text("x")], workspace=tmp_path, session_id="s1",
        trace_path=recorded, record=True,
    )  # fmt: skip
    assert [p["tool_call_id"] for p in payloads(first, "tool_call")] == ["call_0"]  # as recorded
    second = await collect(
        engine, [b.user_text("x")], workspace=tmp_path, session_id="s1",
        trace_path=recorded, record=True,
    )  # fmt: skip
    (renamed,) = {p["tool_call_id"] for p in payloads(second, "tool_call")}
    assert renamed != "call_0" and renamed.startswith("call_0_")
    # Every message of the call follows the new id.
    for kind in ("partial_tool_call", "approval_decision", "tool_call_output"):
        assert {p["tool_call_id"] for p in payloads(second, kind)} == {renamed}, kind

    # A new engine (a restart) learns the used ids from the session's trace.
    from omni_grpc.convert import serialize_message

    trace = tmp_path / "trace.jsonl"
    trace.write_bytes(
        b"".join(
            serialize_message(message_from_dict(m)) + b"\n"
            for m in first
            if not m["payload"]["type"].startswith("partial_")  # type: ignore[index]
        )
    )
    restarted = create(f"replay:{BASIC_TRACE}", delay_ms="0")
    again = await collect(
        restarted, [b.user_text("x")], workspace=tmp_path, session_id="s1", trace_path=trace
    )
    assert [p["tool_call_id"] for p in payloads(again, "tool_call")] != ["call_0"]
