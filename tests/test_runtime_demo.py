"""The demo engine on its own: the whole protocol, deterministic, abortable anywhere."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from omni_grpc import protocol
from omni_grpc.convert import message_from_dict
from omni_grpc.engines import demo
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
    prompt: str = "hello demo",
) -> list[JsonObject]:
    """``trace``: the session's trace, recorded as the hub would (input, then
    every recordable message), so a later run sees this one as its past."""
    abort = AbortSignal()
    asked: list[JsonObject] = []

    async def approve(call: JsonObject) -> Decision:
        asked.append(call)
        return decision

    writer = TraceWriter(trace) if trace is not None else None
    run_input = [protocol.user_text(prompt)]
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


# ---- how the demo cuts a text into deltas --------------------------------------

_TEXTS = st.lists(
    st.tuples(
        st.text(alphabet="ab\u00e9\U0001f600", min_size=1, max_size=60),
        st.text(alphabet=" \n\t", max_size=3),
    ),
    max_size=2500,
).map(lambda parts: "".join(word + gap for word, gap in parts))


@given(_TEXTS, st.integers(min_value=1, max_value=3))
def test_a_text_is_cut_into_whole_words_and_a_bounded_number_of_deltas(
    once: str, repeat: int
) -> None:
    text = once * repeat
    chunks = list(demo._words(text, scale=len(once)))
    assert "".join(chunks) == text
    words = [m.group() for m in demo._WORD.finditer(text)]
    # Every cut falls where a word (with its trailing whitespace) ends.
    assert set(itertools.accumulate(map(len, chunks))) <= set(itertools.accumulate(map(len, words)))
    least = -(-len(once) // demo._DELTAS_AT_MOST)
    if least <= 1:
        assert chunks == words  # a short text goes word by word, as before
    else:
        assert all(len(chunk) >= least for chunk in chunks[:-1])
        assert len(chunks) <= repeat * demo._DELTAS_AT_MOST + 1


def segment_deltas(messages: list[JsonObject]) -> dict[str, list[int]]:
    """Per partial kind, the number of deltas of each of its segments."""
    out: dict[str, list[int]] = {}
    for m in messages:
        p = m["payload"]
        if p["type"].startswith("partial_"):
            runs = out.setdefault(p["type"], [])
            if p["event_type"] == "start":
                runs.append(0)
            elif p["event_type"] == "delta":
                runs[-1] += 1
    return out


@pytest.mark.parametrize("repeat", [1, 3])
async def test_a_megabyte_prompt_of_words_streams_in_thousands_of_deltas(
    tmp_path: Path, repeat: int
) -> None:
    # A pasted log: about 180,000 words. Word by word it was that many
    # deltas in its thinking and as many in its answer.
    prompt = "".join(f"line {n}: GET /index.html 200\n" for n in range(40_000))
    assert len(prompt) > 1 << 20
    messages = await play(DemoEngine(repeat=repeat), tmp_path, prompt=prompt)
    deltas = segment_deltas(messages)
    thinking, text = deltas["partial_thinking"], deltas["partial_text"]
    assert len(thinking) == 1 and 1000 < thinking[0] <= demo._DELTAS_AT_MOST + 1
    said, answer = text  # request 1's short sentence, then the final answer
    assert said == len(demo._WORD.findall("I'll list the session workspace first."))
    assert repeat * 1000 < answer <= repeat * demo._DELTAS_AT_MOST + 1
    # Still whole: the deltas join to the complete messages, which echo the prompt.
    aggregated = protocol.aggregate_all(
        [m for m in messages if m["payload"]["type"].startswith("partial_")]
    )
    completes = [m for m in messages if m["payload"]["type"] in ("text", "thinking")]
    assert [m["payload"] for m in aggregated if m["payload"]["type"] in ("text", "thinking")] == [
        m["payload"] for m in completes
    ]
    assert repr(prompt) in completes[0]["payload"]["thinking"]
    assert completes[-1]["payload"]["text"].count(repr(prompt)) == repeat


async def test_a_prompt_of_one_long_word_is_never_cut(tmp_path: Path) -> None:
    prompt = "p" * (1 << 20)
    messages = await play(DemoEngine(), tmp_path, prompt=prompt)
    last_text = max(i for i, m in enumerate(messages) if kinds([m]) == ["partial_text:start"])
    segments = {
        "thinking": [m for m in messages if m["payload"]["type"] == "partial_thinking"],
        "text": messages[last_text:],  # the final answer's segment
    }
    for key, segment in segments.items():
        chunks = [m["payload"][key] for m in segment if m["payload"].get("event_type") == "delta"]
        # The prompt's repr is one word: one delta carries it whole.
        assert 1 <= len(chunks) <= 3 and any(repr(prompt) in chunk for chunk in chunks)
