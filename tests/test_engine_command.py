"""The command engine: real child processes speaking JSONL over stdio."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import shutil
import signal
import sys
from pathlib import Path

import pytest
from fakes.harness import Approver, as_dict, collect, kinds, payloads

from omni_grpc.engines.base import AbortSignal, RunOptions
from omni_grpc.engines.command import CommandEngine, create
from omni_grpc.protocol import builders as b
from omni_grpc.runtime.trace_store import ShardedTrace

ROOT = Path(__file__).resolve().parent.parent
NODE_ENGINE = ROOT / "examples" / "node-engine" / "engine.mjs"
BAD_ENGINE = Path(__file__).parent / "fakes" / "bad_engine.py"
# In CI (OMNI_REQUIRE_TOOLCHAINS) a missing node fails these tests instead.
needs_node = pytest.mark.skipif(
    shutil.which("node") is None and not os.environ.get("OMNI_REQUIRE_TOOLCHAINS"),
    reason="needs node",
)


def node_engine(**opts: str) -> CommandEngine:
    return create(f"command:node {shlex.quote(str(NODE_ENGINE))}", **opts)


class _Recording(set[asyncio.subprocess.Process]):
    """The engine's child set, remembering every child it ever held."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[asyncio.subprocess.Process] = []

    def add(self, child: asyncio.subprocess.Process) -> None:
        self.seen.append(child)
        super().add(child)


def _record_children(engine: CommandEngine) -> list[asyncio.subprocess.Process]:
    recording = _Recording()
    engine._children = recording
    return recording.seen


def bad_engine(mode: str, **opts: str) -> CommandEngine:
    return create(f"command:{shlex.quote(sys.executable)} {shlex.quote(str(BAD_ENGINE))} {mode}",
                  **opts)  # fmt: skip


@needs_node
async def test_the_node_example_answers_with_streamed_text(tmp_path: Path) -> None:
    out = await collect(node_engine(), [b.user_text("hello there")], workspace=tmp_path)
    assert kinds(out)[:3] == ["tool_list_ready", "request_begin", "partial_text:start"]
    assert kinds(out)[-4:] == ["partial_text:stop", "text", "token_usage", "request_end"]
    assert payloads(out, "text")[0]["text"] == "You said: hello there"
    deltas = [p["text"] for p in payloads(out, "partial_text") if p["event_type"] == "delta"]
    assert "".join(deltas) == "You said: hello there"


@needs_node
async def test_the_node_example_asks_for_approval_and_runs_its_tool(tmp_path: Path) -> None:
    (tmp_path / "notes.md").write_text("x")
    (tmp_path / "src").mkdir()
    approver = Approver()
    out = await collect(
        node_engine(), [b.user_text("which files are here?")], workspace=tmp_path, approve=approver
    )
    assert len(approver.calls) == 1
    call_id = approver.calls[0]["payload"]["tool_call_id"]
    order = kinds(out)
    assert order[order.index("tool_call") + 1] == "approval_decision"
    assert payloads(out, "approval_decision") == [
        {"type": "approval_decision", "decision": "allow", "tool_call_id": call_id}
    ]
    assert payloads(out, "tool_call_output")[0]["output"] == "notes.md\nsrc/"
    assert payloads(out, "text")[-1]["text"] == "The workspace holds 2 entries: notes.md, src/."
    assert [p["status"] for p in payloads(out, "request_end")] == ["completed", "completed"]


@needs_node
@pytest.mark.parametrize(
    ("entries", "answer"),
    [
        ([], "The workspace is empty."),
        (["only.txt"], "The workspace holds 1 entry: only.txt."),
        (["b.txt", "a/"], "The workspace holds 2 entries: a/, b.txt."),
    ],
)
async def test_the_node_example_counts_only_real_entries(
    tmp_path: Path, entries: list[str], answer: str
) -> None:
    # The "[empty directory]" placeholder in the tool output is not an entry.
    for name in entries:
        if name.endswith("/"):
            (tmp_path / name).mkdir()
        else:
            (tmp_path / name).write_text("x")
    out = await collect(
        node_engine(), [b.user_text("what files are in the workspace?")],
        workspace=tmp_path, approve=Approver(),
    )  # fmt: skip
    expected_output = "\n".join(sorted(entries)) or "[empty directory]"
    assert payloads(out, "tool_call_output")[0]["output"] == expected_output
    assert payloads(out, "text")[-1]["text"] == answer


@needs_node
async def test_a_denied_call_reaches_the_child(tmp_path: Path) -> None:
    approver = Approver(default="deny")
    out = await collect(
        node_engine(), [b.user_text("list files")], workspace=tmp_path, approve=approver
    )
    assert payloads(out, "approval_decision")[0]["decision"] == "deny"
    assert payloads(out, "tool_call_output")[0] == {
        "type": "tool_call_output", "role": "user", "output": "Tool call denied by user.",
        "tool_call_id": approver.calls[0]["payload"]["tool_call_id"], "stop_reason": "aborted",
    }  # fmt: skip
    assert payloads(out, "text")[-1]["text"] == "Understood, I will not look."


@needs_node
async def test_abort_is_a_line_and_the_child_ends_its_own_stream(tmp_path: Path) -> None:
    engine = node_engine()
    abort = AbortSignal()

    def on_message(msg: dict[str, object]) -> None:
        if msg["payload"].get("event_type") == "delta":  # type: ignore[union-attr]
            abort.set("user pressed stop")

    # delay_ms in metadata slows the child's streaming so the abort lands mid-text;
    # the aborted text below is the evidence that the child stopped early.
    out = await collect(engine, [b.user_text("a b c d e f g h i j k")], workspace=tmp_path,
                        abort=abort, on_message=on_message, metadata={"delay_ms": 50})  # fmt: skip
    assert kinds(out)[-4:] == ["partial_text:stop", "text", "request_end", "abort"]
    assert payloads(out, "text")[0]["stop_reason"] == "aborted"
    assert out[-1]["payload"] == {"type": "abort", "reason": "user pressed stop"}


async def test_the_request_line_carries_the_run(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    prompt = b.user_text("hi")
    options = RunOptions(session_id="session-9", approve=Approver(), abort=AbortSignal(),
                         thinking_level="low", workspace=tmp_path, trace=ShardedTrace([trace]),
                         metadata={"k": [1, 2]})  # fmt: skip
    out = [as_dict(m) async for m in bad_engine("echo-request").run([prompt], options)]
    sent = json.loads(out[1]["payload"]["text"])
    assert sent == {
        "type": "run", "protocol": 1, "session_id": "session-9", "input": [prompt],
        "thinking_level": "low", "workspace": str(tmp_path), "trace_path": str(trace),
        "metadata": {"k": [1, 2]},
    }  # fmt: skip


async def test_a_crash_closes_the_stream_with_the_exit_code_and_stderr(tmp_path: Path) -> None:
    out = await collect(bad_engine("crash"), [b.user_text("x")], workspace=tmp_path)
    assert kinds(out) == [
        "request_begin", "partial_text:start", "partial_text:delta", "partial_text:stop", "text",
        "request_end", "abort",
    ]  # fmt: skip
    assert payloads(out, "text")[0] == {
        "type": "text", "role": "assistant", "text": "Half", "stop_reason": "failed"
    }  # fmt: skip
    reason = (
        "engine process exited with code 3; its stderr ends: "
        "Traceback: something broke inside the agent"
    )
    assert payloads(out, "request_end") == [
        {"type": "request_end", "status": "failed", "error_message": reason}
    ]
    assert out[-1]["payload"] == {"type": "abort", "reason": reason}


@pytest.mark.parametrize(
    ("mode", "reason"),
    [
        ("garbage", "engine process wrote an invalid OmniMessage on stdout line 2: "),
        (
            "bad-message",
            "engine process wrote an invalid OmniMessage on stdout line 2: /payload/role",
        ),
        ("unfinished", "engine process exited with its stream unfinished"),
    ],
)
async def test_protocol_violations_fail_the_run_with_a_clear_reason(
    tmp_path: Path, mode: str, reason: str
) -> None:
    engine = bad_engine(mode)
    children = _record_children(engine)
    out = await collect(engine, [b.user_text("x")], workspace=tmp_path)
    if mode != "unfinished":
        # The child sleeps after its bad line: it was signalled, not waited for.
        assert [child.returncode for child in children] == [-signal.SIGTERM]
    end = payloads(out, "request_end")[-1]
    assert end["status"] == "failed"
    assert end["error_message"].startswith(reason)
    assert kinds(out)[-1] == "abort"
    assert out[-1]["payload"]["reason"] == end["error_message"]


async def test_a_silent_child_times_out(tmp_path: Path) -> None:
    engine = bad_engine("hang", idle_timeout="0.5")
    out = await collect(engine, [b.user_text("x")], workspace=tmp_path)
    assert payloads(out, "text")[0]["stop_reason"] == "failed"
    assert (
        payloads(out, "request_end")[0]["error_message"] == "engine process wrote nothing for 0.5 s"
    )


@pytest.mark.parametrize("mode", ["ignore-abort", "stubborn"])
async def test_a_child_ignoring_abort_is_terminated_after_the_grace_period(
    tmp_path: Path, mode: str
) -> None:
    engine = bad_engine(mode, grace_ms="300", cwd=str(tmp_path))
    children = _record_children(engine)
    abort = AbortSignal()

    def on_message(msg: dict[str, object]) -> None:
        if msg["payload"].get("event_type") == "delta":  # type: ignore[union-attr]
            abort.set("stop")

    out = await collect(engine, [b.user_text("x")], workspace=tmp_path, abort=abort,
                        on_message=on_message)  # fmt: skip
    # The abort line reached the child before any signal did (the grace), then
    # SIGTERM, and SIGKILL for the child that ignores SIGTERM.
    assert (tmp_path / "got-abort").read_text().startswith("{")
    expected = -signal.SIGKILL if mode == "stubborn" else -signal.SIGTERM
    assert [child.returncode for child in children] == [expected]
    assert kinds(out)[-4:] == ["partial_text:stop", "text", "request_end", "abort"]
    assert payloads(out, "request_end") == [{"type": "request_end", "status": "aborted"}]
    assert out[-1]["payload"] == {"type": "abort", "reason": "stop"}
    assert not engine._children


async def test_a_missing_program_fails_cleanly(tmp_path: Path) -> None:
    out = await collect(create("command:/no/such/program --flag"), [], workspace=tmp_path)
    assert kinds(out) == ["request_begin", "request_end", "abort"]
    assert payloads(out, "request_end")[0]["error_message"].startswith(
        "cannot start '/no/such/program'"
    )


async def test_runs_in_parallel_use_separate_processes(tmp_path: Path) -> None:
    engine = bad_engine("echo-request")
    runs = [collect(engine, [b.user_text(str(i))], workspace=tmp_path, session_id=f"s{i}")
            for i in range(8)]  # fmt: skip
    results = await asyncio.gather(*runs)
    sessions = [json.loads(payloads(r, "text")[0]["text"])["session_id"] for r in results]
    assert sessions == [f"s{i}" for i in range(8)]


@pytest.mark.parametrize(
    ("spec", "options", "message"),
    [
        ("command:", {}, "name the program"),
        ("command:x", {"speed": "1"}, "unknown option(s) speed"),
        ("command:x", {"grace_ms": "soon"}, "grace_ms='soon' is not a number"),
        ("command:x", {"idle_timeout": "-1"}, "idle_timeout='-1' must not be negative"),
        ("command:x", {"cwd": "/no/such/dir"}, "is not a directory"),
        ("command:x 'unclosed", {}, "No closing quotation"),
    ],
)
def test_bad_specs_are_refused(spec: str, options: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        create(spec, **options)


# A child that names its one tool call call_1 in every run, and checks that the
# approval it gets back uses that name.
SAME_ID_CHILD = r"""
import json, sys
def send(kind, payload):
    print(json.dumps({"timestamp": "2026-08-23T10:00:00.000Z", "type": kind, "payload": payload}),
          flush=True)
sys.stdin.readline()  # the run request
send("event_msg", {"type": "request_begin"})
send("model_msg", {"type": "tool_call", "role": "assistant", "name": "ls", "arguments": "{}",
                   "tool_call_id": "call_1", "stop_reason": "completed"})
answer = json.loads(sys.stdin.readline())
if answer.get("tool_call_id") != "call_1":
    sys.exit(3)
send("event_msg", {"type": "approval_decision", "decision": answer["decision"],
                   "tool_call_id": "call_1"})
send("event_msg", {"type": "request_end", "status": "completed"})
send("model_msg", {"type": "tool_call_output", "role": "user", "output": "x",
                   "tool_call_id": "call_1", "stop_reason": "completed"})
"""


async def test_a_child_that_reuses_a_call_id_gets_it_renamed(tmp_path: Path) -> None:
    from omni_grpc.convert import message_from_dict, serialize_message

    child = tmp_path / "same_id.py"
    child.write_text(SAME_ID_CHILD)
    engine = create(f"command:{shlex.quote(sys.executable)} {shlex.quote(str(child))}")
    trace = tmp_path / "trace.jsonl"
    ids = []
    for _ in range(2):
        out = await collect(engine, [b.user_text("go")], workspace=tmp_path, trace_path=trace)
        assert [p["status"] for p in payloads(out, "request_end")] == ["completed"]
        (call_id,) = {p["tool_call_id"] for p in payloads(out, "tool_call")}
        for kind in ("approval_decision", "tool_call_output"):
            assert {p["tool_call_id"] for p in payloads(out, kind)} == {call_id}
        ids.append(call_id)
        with trace.open("ab") as fh:
            fh.writelines(serialize_message(message_from_dict(m)) + b"\n" for m in out)
    assert ids[0] == "call_1" and ids[1] != "call_1" and ids[1].startswith("call_1_")
    # A new engine (a restart) learns the used ids from the trace.
    again = create(f"command:{shlex.quote(sys.executable)} {shlex.quote(str(child))}")
    out = await collect(again, [b.user_text("go")], workspace=tmp_path, trace_path=trace)
    assert {p["tool_call_id"] for p in payloads(out, "tool_call")}.isdisjoint(ids)


@pytest.mark.parametrize("prompt_bytes", [10, 1 << 20])
async def test_a_child_that_exits_without_reading_is_named_by_its_exit_status(
    tmp_path: Path, prompt_bytes: int
) -> None:
    """``command:false`` exits 1 at once. A small request still fits the pipe,
    a large one meets a closed stdin; either way the failure names the status."""
    false = shutil.which("false")
    assert false is not None
    out = await collect(create(f"command:{false}"), [b.user_text("x" * prompt_bytes)],
                        workspace=tmp_path)  # fmt: skip
    reason = "engine process exited with code 1"
    assert payloads(out, "request_end") == [
        {"type": "request_end", "status": "failed", "error_message": reason}
    ]
    assert out[-1]["payload"] == {"type": "abort", "reason": reason}
