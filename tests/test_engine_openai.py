"""The openai engine against a local OpenAI-compatible streaming server."""

from __future__ import annotations

import asyncio
import shutil
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakes.harness import Approver, collect, kinds, payloads
from fakes.openai_server import (
    Chunk,
    FakeOpenAI,
    Raw,
    Reply,
    drop_reply,
    error_reply,
    stall_reply,
    text_reply,
    tool_calls_reply,
)

from omni_grpc.engines.base import AbortSignal
from omni_grpc.engines.openai import OpenAIConfig, OpenAIEngine
from omni_grpc.protocol import builders as b

CONFORMANCE = Path(__file__).parent / "conformance"


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


def engine_for(fake: FakeOpenAI, **opts: str) -> OpenAIEngine:
    options = {"base_url": fake.base_url, "model": "fake-model", "api_key": "sk-test",
               "retry_base_ms": "10", **opts}  # fmt: skip
    return OpenAIEngine(OpenAIConfig.from_options(options, env={}))


def user(text: str) -> dict[str, object]:
    return b.user_text(text)


async def test_text_reply_streams_partials_then_the_complete_message(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    fake.script(text_reply("Hello there, friend!", pieces=3, tokens=(100, 7, 60)))
    out = await collect(engine_for(fake), [user("hi")], workspace=tmp_path)

    assert kinds(out) == [
        "tool_list_ready", "request_begin", "partial_text:start", "partial_text:delta",
        "partial_text:delta", "partial_text:delta", "partial_text:stop", "text",
        "token_usage", "request_end",
    ]  # fmt: skip
    deltas = [p["text"] for p in payloads(out, "partial_text") if p["event_type"] == "delta"]
    assert "".join(deltas) == "Hello there, friend!"
    assert payloads(out, "text") == [
        {"type": "text", "role": "assistant", "text": "Hello there, friend!",
         "stop_reason": "completed"}
    ]  # fmt: skip
    usage = payloads(out, "token_usage")[0]
    assert usage["request"] == {"cache_read": 60, "cache_write": 40, "output": 7, "total": 107}
    assert payloads(out, "request_end") == [{"type": "request_end", "status": "completed"}]

    sent = fake.requests[0]
    assert sent.headers["authorization"] == "Bearer sk-test"
    assert sent.body["stream"] is True
    assert sent.body["stream_options"] == {"include_usage": True}
    assert sent.body["messages"][0]["role"] == "system"
    assert sent.body["messages"][1:] == [{"role": "user", "content": "hi"}]
    assert [t["function"]["name"] for t in sent.body["tools"]] == ["read_file", "list_directory"]


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
async def test_reasoning_becomes_thinking_with_the_field_name_in_fidelity(
    fake: FakeOpenAI, tmp_path: Path, field: str
) -> None:
    fake.script(text_reply("42.", reasoning="Think hard. Then answer.", reasoning_field=field))
    out = await collect(engine_for(fake), [user("q")], workspace=tmp_path, thinking_level="high")

    assert kinds(out)[2:7] == [
        "partial_thinking:start", "partial_thinking:delta", "partial_thinking:delta",
        "partial_thinking:delta", "partial_thinking:stop",
    ]  # fmt: skip
    assert payloads(out, "thinking") == [
        {"type": "thinking", "role": "assistant", "thinking": "Think hard. Then answer.",
         "stop_reason": "completed", "fidelity": {"reasoning_field": field}}
    ]  # fmt: skip
    assert payloads(out, "text")[0]["text"] == "42."
    assert fake.requests[0].body["reasoning_effort"] == "high"


async def test_parallel_tool_calls_approved_in_order_run_concurrently_returned_in_call_order(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    fake.script(
        tool_calls_reply([("call_a", "sleep", '{"ms": 300}'), ("call_b", "sleep", '{"ms": 10}')]),
        text_reply("both done"),
    )
    approver = Approver()
    engine = engine_for(fake, tools="fakes.slow_tools:TOOLS")
    out = await collect(engine, [user("wait twice")], workspace=tmp_path, approve=approver)

    # Each complete tool_call is followed by its decision; approvals were asked in call order.
    order = kinds(out)
    first_call = order.index("tool_call")
    assert order[first_call + 1] == "approval_decision"
    assert [c["payload"]["tool_call_id"] for c in approver.calls] == ["call_a", "call_b"]
    # The stream shows outputs in completion order: b, started second, finished first,
    # which only happens when the calls run concurrently ...
    outputs = payloads(out, "tool_call_output")
    assert [o["tool_call_id"] for o in outputs] == ["call_b", "call_a"]
    assert outputs[1] == {"type": "tool_call_output", "role": "user", "output": "slept 300 ms",
                          "tool_call_id": "call_a", "stop_reason": "completed"}  # fmt: skip
    # ... and the model gets them in call order, after the assistant's tool calls.
    second = fake.requests[1].body["messages"]
    assert second[2]["role"] == "assistant"
    assert [c["id"] for c in second[2]["tool_calls"]] == ["call_a", "call_b"]
    assert second[2]["tool_calls"][0]["function"] == {"name": "sleep", "arguments": '{"ms": 300}'}
    assert [(m["role"], m["tool_call_id"]) for m in second[3:5]] == [
        ("tool", "call_a"), ("tool", "call_b"),
    ]  # fmt: skip
    assert payloads(out, "text")[-1]["text"] == "both done"
    assert kinds(out).count("request_end") == 2


async def test_tool_call_deltas_become_partial_tool_calls(fake: FakeOpenAI, tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("A\n")
    fake.script(tool_calls_reply([("call_1", "read_file", '{"path": "a.txt"}')]), text_reply("ok"))
    out = await collect(engine_for(fake), [user("read")], workspace=tmp_path)

    partials = payloads(out, "partial_tool_call")
    assert [p["event_type"] for p in partials] == ["start", "delta", "delta", "stop"]
    assert all(p["name"] == "read_file" and p["tool_call_id"] == "call_1" for p in partials)
    assert "".join(p["arguments"] for p in partials) == '{"path": "a.txt"}'
    assert payloads(out, "tool_call")[0]["arguments"] == '{"path": "a.txt"}'
    assert payloads(out, "tool_call_output")[0]["output"] == "     1\tA"


async def test_denied_calls_get_the_synthetic_output_and_never_run(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    fake.script(
        tool_calls_reply([("call_x", "explode", "{}"), ("call_y", "sleep", '{"ms": 1}')]),
        text_reply("fine"),
    )
    approver = Approver(decisions={"call_x": "deny", "call_y": "forbidden"})
    engine = engine_for(fake, tools="fakes.slow_tools:TOOLS")
    out = await collect(engine, [user("go")], workspace=tmp_path, approve=approver)

    assert payloads(out, "approval_decision") == [
        {"type": "approval_decision", "decision": "deny", "tool_call_id": "call_x"},
        {"type": "approval_decision", "decision": "forbidden", "tool_call_id": "call_y"},
    ]
    assert [(o["output"], o["stop_reason"]) for o in payloads(out, "tool_call_output")] == [
        ("Tool call denied by user.", "aborted"),
        ("Tool call denied by policy.", "aborted"),
    ]
    tool_msgs = [m for m in fake.requests[1].body["messages"] if m["role"] == "tool"]
    assert [m["content"] for m in tool_msgs] == [
        "Tool call denied by user.", "Tool call denied by policy.",
    ]  # fmt: skip


async def test_a_throwing_approver_denies(fake: FakeOpenAI, tmp_path: Path) -> None:
    fake.script(tool_calls_reply([("call_x", "sleep", '{"ms": 1}')]), text_reply("ok"))

    async def broken(call: object) -> str:
        raise RuntimeError("host went away")

    engine = engine_for(fake, tools="fakes.slow_tools:TOOLS")
    out = await collect(engine, [user("go")], workspace=tmp_path, approve=broken)  # type: ignore[arg-type]
    assert payloads(out, "approval_decision")[0]["decision"] == "deny"


async def test_builtin_tools_stay_inside_the_workspace(fake: FakeOpenAI, tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    (workspace / "sub").mkdir(parents=True)
    (workspace / "notes.md").write_text("one\ntwo\n")
    (tmp_path / "secret.txt").write_text("do not read")
    (workspace / "link").symlink_to(tmp_path / "secret.txt")
    fake.script(
        tool_calls_reply([
            ("c1", "read_file", '{"path": "../secret.txt"}'),
            ("c2", "read_file", '{"path": "link"}'),
            ("c3", "read_file", '{"path": "/etc/passwd"}'),
            ("c4", "list_directory", '{"path": "."}'),
            ("c5", "read_file", '{"path": "notes.md", "offset": 2}'),
            ("c6", "read_file", '{"path": "missing.md"}'),
            ("c7", "read_file", "{not json"),
        ]),
        text_reply("done"),
    )  # fmt: skip
    out = await collect(engine_for(fake), [user("look")], workspace=workspace)
    by_id = {o["tool_call_id"]: o for o in payloads(out, "tool_call_output")}

    assert by_id["c1"]["output"] == "[tool error] ../secret.txt: outside the workspace"
    assert by_id["c1"]["stop_reason"] == "failed"
    assert by_id["c2"]["output"] == "[tool error] link: outside the workspace"
    assert by_id["c3"]["output"] == "[tool error] /etc/passwd: outside the workspace"
    assert by_id["c4"]["output"] == ".:\nlink\nnotes.md\nsub/"
    assert by_id["c5"]["output"] == "     2\ttwo"
    assert by_id["c6"]["output"] == "[tool error] missing.md: no such file"
    assert by_id["c7"]["output"].startswith("[tool error] the arguments are not valid JSON")
    assert "do not read" not in str(out)


async def test_a_500_is_retried_with_attempt_and_backoff(fake: FakeOpenAI, tmp_path: Path) -> None:
    fake.script(error_reply(500, "upstream exploded"), error_reply(503, "busy"), text_reply("ok"))
    out = await collect(engine_for(fake, retry_base_ms="20"), [user("hi")], workspace=tmp_path)

    assert payloads(out, "request_end") == [
        {"type": "request_end", "status": "failed", "error_message": "500 upstream exploded",
         "attempt": 1, "retry_in_ms": 20},
        {"type": "request_end", "status": "failed", "error_message": "503 busy",
         "attempt": 2, "retry_in_ms": 40},
        {"type": "request_end", "status": "completed", "attempt": 3},
    ]  # fmt: skip
    assert kinds(out).count("request_begin") == 3
    assert len(fake.requests) == 3


async def test_a_stall_times_out_and_the_partial_text_ends_with_timeout(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    fake.script(stall_reply(5, after_text="Let me"), text_reply("Hello!"))
    # The request_end "timeout" below is the evidence that the stall was cut short.
    out = await collect(engine_for(fake, timeout="0.3"), [user("hi")], workspace=tmp_path)

    assert kinds(out)[:8] == [
        "tool_list_ready", "request_begin", "partial_text:start", "partial_text:delta",
        "partial_text:stop", "text", "request_end", "request_begin",
    ]  # fmt: skip
    assert payloads(out, "partial_text")[2]["stop_reason"] == "timeout"
    assert payloads(out, "text")[0] == {
        "type": "text", "role": "assistant", "text": "Let me", "stop_reason": "timeout"
    }  # fmt: skip
    first_end = payloads(out, "request_end")[0]
    assert first_end["status"] == "timeout"
    assert first_end["error_message"].startswith("timeout")
    assert (first_end["attempt"], first_end["retry_in_ms"]) == (1, 10)
    assert payloads(out, "text")[1]["text"] == "Hello!"
    # The failed attempt is not part of the history the retry sends.
    assert all(m["role"] != "assistant" for m in fake.requests[1].body["messages"])


async def test_a_dropped_connection_is_a_timeout(fake: FakeOpenAI, tmp_path: Path) -> None:
    fake.script(drop_reply(after_text="par"), text_reply("whole"))
    out = await collect(engine_for(fake), [user("hi")], workspace=tmp_path)
    ends = payloads(out, "request_end")
    assert ends[0]["status"] == "timeout"
    assert ends[0]["error_message"].startswith("connection lost")
    assert ends[1] == {"type": "request_end", "status": "completed", "attempt": 2}


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_a_refused_connection_says_so_and_names_the_endpoint(tmp_path: Path) -> None:
    port = closed_port()
    options = {"base_url": f"http://127.0.0.1:{port}/v1", "model": "m", "api_key": "k",
               "retry_base_ms": "1", "max_attempts": "2"}  # fmt: skip
    engine = OpenAIEngine(OpenAIConfig.from_options(options, env={}))
    out = await collect(engine, [user("hi")], workspace=tmp_path)
    reason = f"connection refused by 127.0.0.1:{port}"
    assert [(e["status"], e["error_message"]) for e in payloads(out, "request_end")] == [
        ("timeout", reason),
        ("timeout", reason),
    ]
    assert out[-1]["payload"] == {"type": "abort", "reason": f"llm request error: {reason}"}


async def test_a_connection_dropped_mid_stream_is_lost_not_refused(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    fake.script(drop_reply(after_text="par"))
    out = await collect(engine_for(fake, max_attempts="1"), [user("hi")], workspace=tmp_path)
    end = payloads(out, "request_end")[0]
    assert end["status"] == "timeout"
    assert end["error_message"].startswith("connection lost: ")
    assert out[-1]["payload"] == {
        "type": "abort", "reason": f"llm request error: {end['error_message']}"
    }  # fmt: skip


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        (
            Reply([Chunk({"content": "a"}), Raw("data: {not json\n\n")]),
            "a stream event is not JSON",
        ),
        (Reply([Chunk({"content": "a"})], done=False), "the stream ended before a finish_reason"),
        (Reply([Raw('data: {"choices": 5}\n\n')]), "'choices' is not an array"),
    ],
)
async def test_a_bad_stream_is_malformed_and_retried(
    fake: FakeOpenAI, tmp_path: Path, reply: Reply, reason: str
) -> None:
    fake.script(reply, text_reply("ok"))
    out = await collect(engine_for(fake), [user("hi")], workspace=tmp_path)
    ends = payloads(out, "request_end")
    assert ends[0]["status"] == "malformed"
    assert ends[0]["error_message"].startswith(reason)
    assert ends[1]["status"] == "completed"


@pytest.mark.parametrize("status", [401, 403])
async def test_auth_errors_stop_at_once(fake: FakeOpenAI, tmp_path: Path, status: int) -> None:
    fake.script(error_reply(status, "invalid x-api-key"), text_reply("never"))
    out = await collect(engine_for(fake), [user("hi")], workspace=tmp_path)

    assert kinds(out) == ["tool_list_ready", "request_begin", "request_end", "abort"]
    assert out[2]["payload"] == {
        "type": "request_end", "status": "auth",
        "error_message": f"{status} invalid x-api-key", "attempt": 1,
    }  # fmt: skip
    assert out[3]["payload"] == {
        "type": "abort", "reason": f"llm request error: {status} invalid x-api-key"
    }  # fmt: skip
    assert len(fake.requests) == 1


async def test_five_failed_attempts_then_abort(fake: FakeOpenAI, tmp_path: Path) -> None:
    fake.script(*[error_reply(502, "bad gateway")] * 6)
    out = await collect(engine_for(fake, retry_base_ms="1"), [user("hi")], workspace=tmp_path)
    ends = payloads(out, "request_end")
    assert [e["attempt"] for e in ends] == [1, 2, 3, 4, 5]
    assert [e.get("retry_in_ms") for e in ends] == [1, 2, 4, 8, None]
    assert out[-1]["payload"] == {"type": "abort", "reason": "llm request error: 502 bad gateway"}
    assert len(fake.requests) == 5


async def test_a_bad_request_is_not_retried(fake: FakeOpenAI, tmp_path: Path) -> None:
    fake.script(error_reply(400, "unknown model"), text_reply("never"))
    out = await collect(engine_for(fake), [user("hi")], workspace=tmp_path)
    assert kinds(out)[-2:] == ["request_end", "abort"]
    assert payloads(out, "request_end")[0]["status"] == "failed"
    assert len(fake.requests) == 1


async def test_abort_cancels_the_request_and_ends_with_abort(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    fake.script(stall_reply(30, after_text="Planning"))
    abort = AbortSignal()

    def on_message(msg: dict[str, object]) -> None:
        if msg["payload"].get("event_type") == "delta":  # type: ignore[union-attr]
            asyncio.get_running_loop().call_later(0.05, abort.set, "aborted by user")

    started = time.monotonic()
    out = await collect(
        engine_for(fake), [user("essay")], workspace=tmp_path, abort=abort, on_message=on_message
    )
    # Well under the 30 s stall: the abort cancelled the HTTP request rather than
    # waiting it out (a loose bound, so a loaded machine does not matter).
    assert time.monotonic() - started < 15
    assert kinds(out)[-4:] == ["partial_text:stop", "text", "request_end", "abort"]
    assert payloads(out, "text")[0]["stop_reason"] == "aborted"
    assert out[-2]["payload"] == {"type": "request_end", "status": "aborted", "attempt": 1}
    assert out[-1]["payload"] == {"type": "abort", "reason": "aborted by user"}


async def test_abort_while_waiting_for_approval(fake: FakeOpenAI, tmp_path: Path) -> None:
    fake.script(tool_calls_reply([("call_1", "sleep", '{"ms": 1}')]))
    abort = AbortSignal()

    async def never(call: object) -> str:
        asyncio.get_running_loop().call_later(0.05, abort.set, "stop it")
        await asyncio.sleep(30)
        return "allow"

    engine = engine_for(fake, tools="fakes.slow_tools:TOOLS")
    out = await collect(engine, [user("go")], workspace=tmp_path, approve=never, abort=abort)  # type: ignore[arg-type]
    # Nobody decided: no approval_decision, and the call's output says why.
    assert "approval_decision" not in kinds(out)
    [output] = payloads(out, "tool_call_output")
    assert output["stop_reason"] == "aborted"
    assert output["output"] == "Tool call not run: stop it."
    assert out[-1]["payload"] == {"type": "abort", "reason": "stop it"}


async def test_history_is_rebuilt_from_committed_turns_of_the_trace(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    # A real reference trace: a retried turn that committed ("hi" -> "Hello!"), then
    # an auth failure ("again") and a user abort ("write a long essay"), both uncommitted.
    trace = tmp_path / "trace.jsonl"
    shutil.copy(CONFORMANCE / "trace_retry_auth_abort_001.jsonl", trace)
    fake.script(text_reply("resumed"))
    out = await collect(engine_for(fake), [user("continue")], workspace=tmp_path, trace_path=trace)

    assert payloads(out, "text")[0]["text"] == "resumed"
    assert fake.requests[0].body["messages"][1:] == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "Hello!"},
        # Uncommitted turns' input is carried over; their assistant output is dropped.
        {"role": "user", "content": "again\n\nwrite a long essay\n\ncontinue"},
    ]
    # The session's token totals continue from the trace.
    assert payloads(out, "token_usage")[0]["session"]["total"] == 120 + 15


async def test_tool_outputs_after_request_end_are_committed_in_call_order(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    trace = tmp_path / "trace.jsonl"
    shutil.copy(CONFORMANCE / "trace_approvals_parallel_001.jsonl", trace)
    fake.script(text_reply("ok"))
    await collect(engine_for(fake), [user("next")], workspace=tmp_path, trace_path=trace)

    messages = fake.requests[0].body["messages"]
    tools = [(m["tool_call_id"], m["content"]) for m in messages if m["role"] == "tool"]
    assert tools == [
        ("call_a", "Tool call denied by policy."),
        ("call_b", "Tool call denied by user."),
        ("call_c", "[tool error] ENOENT: a.txt"),  # finished last, after request_end
        ("call_d", "     1\tB"),
    ]
    assert messages[-2] == {"role": "assistant", "content": "a.txt is missing; b.txt says B."}


async def test_input_already_recorded_in_the_trace_is_not_sent_twice(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    prompt = user("only once")
    trace = tmp_path / "trace.jsonl"
    trace.write_text(
        '{"timestamp":"2026-01-01T00:00:00.000Z","type":"session_meta","payload":{"session_id":'
        '"s","provider":"openai","model_id":"m","model_context_window":1,"system_prompt":"",'
        '"agent_state":"","workspace":"/w"}}\n'
        + __import__("json").dumps(prompt, separators=(",", ":"))
        + "\n"
    )
    fake.script(text_reply("ok"))
    await collect(engine_for(fake), [prompt], workspace=tmp_path, trace_path=trace)
    assert fake.requests[0].body["messages"][1:] == [{"role": "user", "content": "only once"}]


def test_session_meta_describes_the_model(tmp_path: Path) -> None:
    config = OpenAIConfig.from_options(
        {"model": "llama-3", "base_url": "http://x/v1", "context_window": "8192",
         "system_prompt": "Be brief.", "provider": "vllm"}, env={},
    )  # fmt: skip
    meta = OpenAIEngine(config).session_meta("session-1", tmp_path)
    assert list(meta) == [
        "session_id", "provider", "model_id", "model_context_window", "system_prompt",
        "agent_state", "workspace",
    ]  # fmt: skip
    assert (meta["provider"], meta["model_id"], meta["model_context_window"]) == (
        "vllm", "llama-3", 8192,
    )  # fmt: skip
    assert meta["workspace"] == str(tmp_path)


def test_config_comes_from_options_then_environment() -> None:
    env = {"OPENAI_API_KEY": "sk-env", "OPENAI_BASE_URL": "http://env/v1", "OPENAI_MODEL": "m"}
    config = OpenAIConfig.from_options({}, env=env)
    assert (config.api_key, config.base_url, config.model) == ("sk-env", "http://env/v1", "m")
    assert config.chat_url == "http://env/v1/chat/completions"
    assert [config.backoff_ms(n) for n in range(1, 6)] == [2000, 4000, 8000, 16000, 30000]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "set --engine-opt model=NAME"),
        ({"model": "m", "colour": "red"}, "unknown option(s) colour"),
        ({"model": "m", "timeout": "soon"}, "timeout='soon' is not a number"),
        ({"model": "m", "timeout": "-1"}, "timeout='-1' must be more than 0 seconds"),
        ({"model": "m", "connect_timeout": "0"}, "connect_timeout='0' must be more than 0"),
        ({"model": "m", "max_attempts": "9"}, "max_attempts='9' must be between 1 and 5"),
        ({"model": "m", "tools": "fakes.slow_tools"}, "expected 'module:object'"),
        ({"model": "m", "tools": "no_such_module:X"}, "cannot import 'no_such_module'"),
        ({"model": "m", "tools": "fakes.slow_tools:NOPE"}, "has no 'NOPE'"),
        ({"model": "m", "tools": "fakes.slow_tools:NOT_TOOLS"}, "expected a Tool or an iterable"),
        ({"model": "m", "builtin_tools": "maybe"}, "must be true or false"),
    ],
)
def test_bad_options_are_refused_by_name(options: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=__import__("re").escape(message)):
        OpenAIConfig.from_options(options, env={})


def test_user_tools_load_from_a_factory_and_names_must_be_unique() -> None:
    config = OpenAIConfig.from_options(
        {"model": "m", "tools": "fakes.slow_tools:make_tools"}, env={}
    )
    assert list(config.tools) == ["read_file", "list_directory", "sleep", "explode"]
    assert config.tools["read_file"].read_only and not config.tools["sleep"].read_only


async def test_a_provider_that_repeats_call_ids_gets_unique_ones(
    fake: FakeOpenAI, tmp_path: Path
) -> None:
    """Some servers number calls per response (call_0 every time); a resumed trace
    pairs outputs by id, so a reused id is renamed, and the model sees the new one."""
    from omni_grpc.convert import message_from_dict, serialize_message

    trace = tmp_path / "trace.jsonl"
    earlier = [
        b.user_text("first"),
        b.request_begin(),
        b.tool_call("sleep", '{"ms": 1}', "call_0"),
        b.request_end("completed"),
        b.tool_call_output("slept 1 ms", "call_0"),
    ]
    trace.write_bytes(b"".join(serialize_message(message_from_dict(m)) + b"\n" for m in earlier))
    fake.script(
        tool_calls_reply([("call_0", "sleep", '{"ms": 1}')]),
        tool_calls_reply([("call_0", "sleep", '{"ms": 1}')]),
        tool_calls_reply([("", "sleep", '{"ms": 1}')]),
        text_reply("done"),
    )
    engine = engine_for(fake, tools="fakes.slow_tools:TOOLS")
    out = await collect(engine, [user("again")], workspace=tmp_path, trace_path=trace)
    ids = [p["tool_call_id"] for p in payloads(out, "tool_call")]
    assert len(ids) == 3 and len({*ids, "call_0"}) == 4, ids
    assert all(i.startswith("call_") for i in ids)
    # Each output answers its own call, and the model is told the same ids.
    assert sorted(p["tool_call_id"] for p in payloads(out, "tool_call_output")) == sorted(ids)
    last = fake.requests[-1].body["messages"]
    sent = [c["id"] for m in last if m["role"] == "assistant" for c in m.get("tool_calls", [])]
    assert sent[-3:] == ids
