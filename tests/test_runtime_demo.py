"""The demo engine on its own: the whole protocol, deterministic, abortable anywhere."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from omni_grpc import protocol
from omni_grpc.convert import message_from_dict
from omni_grpc.engines.base import AbortSignal, Decision, JsonObject, RunOptions
from omni_grpc.engines.demo import DemoEngine
from omni_grpc.engines.loader import EngineLoadError, load_engine
from omni_grpc.runtime.hub import Hub, RunRequest
from omni_grpc.runtime.trace_store import ShardedTrace
from omni_grpc.trace import TraceWriter


def kinds(messages: list[JsonObject]) -> list[str]:
    out = []
    for m in messages:
        p = m["payload"]
        out.append(f"{p['type']}:{p['event_type']}" if "event_type" in p else p["type"])
    return out


async def play(
    engine: DemoEngine,
    workspace: Path,
    decision: Decision = "allow",
    *,
    abort_after: int | None = None,
    thinking_level: str | None = None,
    trace: Path | None = None,
) -> list[JsonObject]:
    """``trace``: the session's trace, recorded as the hub would (input, then
    every recordable message), so a later run sees this one as its past."""
    abort = AbortSignal()
    asked: list[JsonObject] = []

    async def approve(call: JsonObject) -> Decision:
        asked.append(call)
        return decision

    writer = TraceWriter(trace) if trace is not None else None
    run_input = [protocol.user_text("hello demo")]
    if writer is not None:
        writer.write(message_from_dict(run_input[0]))
    options = RunOptions(
        "s1",
        approve,
        abort,
        thinking_level=thinking_level,
        workspace=workspace,
        trace=ShardedTrace([trace]) if trace is not None else None,
    )
    out: list[JsonObject] = []
    async for msg in engine.run(run_input, options):
        out.append(dict(msg))
        if writer is not None:
            writer.write(message_from_dict(dict(msg)))
        if abort_after is not None and len(out) == abort_after:
            abort.set("stop now")
    assert len(asked) <= 1
    return out


async def test_one_prompt_exercises_the_whole_protocol(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hi")
    (tmp_path / "sub").mkdir()
    messages = await play(DemoEngine(), tmp_path)
    k = kinds(messages)
    assert k[:2] == ["tool_list_ready", "request_begin"]
    for kind in (
        "partial_thinking",
        "partial_text",
        "partial_tool_call",
        "partial_tool_call_output",
    ):
        start, stop = k.index(f"{kind}:start"), k.index(f"{kind}:stop")
        assert all(x == f"{kind}:delta" for x in k[start + 1 : stop]) and stop > start + 1
        # The complete message follows its stop immediately.
        assert k[stop + 1] == kind.removeprefix("partial_")
    call = k.index("tool_call")
    assert k[call + 1 : call + 4] == ["approval_decision", "token_usage", "request_end"]
    assert k.count("request_begin") == 2 and k.count("request_end") == 2
    assert k[-2:] == ["token_usage", "request_end"]
    # The deltas join to the complete messages, and the tool really listed the workspace.
    aggregated = protocol.aggregate_all(
        [m for m in messages if m["payload"]["type"].startswith("partial_")]
    )
    model_kinds = ("text", "thinking", "tool_call", "tool_call_output")
    completes = [m for m in messages if m["payload"]["type"] in model_kinds]
    assert [m["payload"] for m in aggregated] == [m["payload"] for m in completes]
    output = next(m for m in messages if m["payload"]["type"] == "tool_call_output")
    assert output["payload"]["output"] == "notes.txt\t2 bytes\nsub/"
    assert "holds 2 entries" in messages[-3]["payload"]["text"]


async def test_the_engine_is_deterministic_apart_from_timestamps(tmp_path: Path) -> None:
    a = await play(DemoEngine(), tmp_path)
    b = await play(DemoEngine(), tmp_path)
    assert [m["payload"] for m in a] == [m["payload"] for m in b]


async def test_a_second_run_skips_the_tool_list_and_counts_tokens_cumulatively(
    tmp_path: Path,
) -> None:
    trace = tmp_path / "trace.jsonl"
    first = await play(DemoEngine(), tmp_path, trace=trace)
    # Another engine instance (another replica, a restart): the past is the trace's.
    second = await play(DemoEngine(), tmp_path, trace=trace)
    assert kinds(second)[0] == "request_begin"
    usage = [m["payload"] for m in first + second if m["payload"]["type"] == "token_usage"]
    totals = [u["session"]["total"] for u in usage]
    assert totals == sorted(totals) and totals[-1] == sum(u["request"]["total"] for u in usage)
    call_ids = {
        m["payload"]["tool_call_id"] for m in first + second if m["payload"]["type"] == "tool_call"
    }
    assert call_ids == {"call_demo_1", "call_demo_2"}


@pytest.mark.parametrize("decision", ["deny", "forbidden"])
async def test_a_refused_tool_gets_the_synthetic_aborted_output(
    tmp_path: Path, decision: Decision
) -> None:
    messages = await play(DemoEngine(), tmp_path, decision)
    k = kinds(messages)
    i = k.index("approval_decision")
    assert messages[i]["payload"]["decision"] == decision
    denied = messages[i + 1]["payload"]
    assert denied["type"] == "tool_call_output" and denied["stop_reason"] == "aborted"
    assert "partial_tool_call_output:start" not in k
    assert "not allowed" in messages[-3]["payload"]["text"]


async def test_thinking_level_none_skips_thinking(tmp_path: Path) -> None:
    k = kinds(await play(DemoEngine(), tmp_path, thinking_level="none"))
    assert "thinking" not in k and "partial_thinking:start" not in k


async def test_abort_at_every_step_closes_everything_and_ends_with_abort(tmp_path: Path) -> None:
    full = len(await play(DemoEngine(), tmp_path))
    for cut in range(1, full):
        messages = await play(DemoEngine(), tmp_path, abort_after=cut)
        k = kinds(messages)
        assert k[-1] == "abort", cut
        assert messages[-1]["payload"]["reason"] == "stop now"
        assert k.count("abort") == 1
        assert k.count("request_begin") == k.count("request_end"), cut
        aggregator = protocol.PartialAggregator()
        for m in messages:
            aggregator.push(m)
        assert aggregator.open_count == 0, cut
        # A fragment cut short ends as aborted, with the text streamed so far.
        for m in messages:
            if m["payload"].get("event_type") == "stop":
                assert m["payload"]["stop_reason"] in ("completed", "aborted")


async def test_pacing_waits_between_deltas_but_abort_interrupts_it(tmp_path: Path) -> None:
    engine = DemoEngine(pacing=30)
    abort = AbortSignal()

    async def approve(call: JsonObject) -> Decision:
        return "allow"

    options = RunOptions("s", approve, abort, workspace=tmp_path)
    out = []

    async def consume() -> None:
        async for msg in engine.run([protocol.user_text("x")], options):
            out.append(msg)
            abort.set()

    await asyncio.wait_for(consume(), 5)  # not 30 s: the abort cut the pause short
    assert out[-1]["payload"] == {"type": "abort", "reason": "aborted by user"}


def test_the_loader_builds_the_demo_and_module_factories() -> None:
    engine = load_engine("demo", {"pacing": "0.5", "repeat": "3"})
    assert isinstance(engine, DemoEngine) and engine.pacing == 0.5 and engine.repeat == 3
    assert isinstance(load_engine("omni_grpc.engines.demo:create", {}), DemoEngine)
    assert isinstance(load_engine("", {}), DemoEngine)


@pytest.mark.parametrize(
    ("spec", "options", "message"),
    [
        ("nope", {}, "unknown engine 'nope'"),
        ("no_such_module_x:f", {}, "cannot import 'no_such_module_x'"),
        ("omni_grpc.engines.demo:missing", {}, "has no 'missing'"),
        ("demo", {"colour": "red", "bogus": "1"}, r"unknown option\(s\) bogus, colour$"),
        ("demo", {"pacing": "-1"}, "pacing=-1.0 must be a finite number >= 0"),
        ("demo", {"pacing": "nan"}, "pacing=nan must be a finite number >= 0"),
        ("demo", {"pacing": "soon"}, "pacing='soon' is not a number of seconds$"),
        ("demo", {"repeat": "abc"}, "repeat='abc' is not a whole number$"),
        ("demo", {"repeat": "0"}, "repeat=0 must be >= 1"),
    ],
)
def test_the_loader_explains_what_is_wrong(
    spec: str, options: dict[str, str], message: str
) -> None:
    with pytest.raises(EngineLoadError, match=message):
        load_engine(spec, options)


async def test_tool_call_ids_stay_unique_across_a_restart(tmp_path: Path) -> None:
    """The call number continues from the trace, not from a per-process count."""
    ids = []
    for _ in range(2):  # two processes over one data directory
        hub = Hub(DemoEngine(), tmp_path / "data")
        sessions = await hub.list_sessions()
        sid = sessions[0].session_id if sessions else None
        for prompt in ("one", "two"):
            text = message_from_dict(protocol.user_text(prompt))
            sid, sub = await hub.run(RunRequest(input=[text], session_id=sid))
            sub.close()
            await hub.wait_idle(sid)
        assert sid is not None
        ids = [
            m.tool_call.tool_call_id
            async for m in await hub.history(sid)
            if m.HasField("tool_call")
        ]
        await hub.shutdown()
    assert ids == ["call_demo_1", "call_demo_2", "call_demo_3", "call_demo_4"]
