"""trace/resume.py: the reference resume rules, and closing a crashed run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import grpc
import pytest

from omni_grpc import protocol
from omni_grpc.convert import message_from_dict, serialize_message
from omni_grpc.engines.demo import DemoEngine
from omni_grpc.runtime.hub import Hub
from omni_grpc.runtime.resumption import RESUMED_REASON, ResumeLimits
from omni_grpc.trace.resume import (
    INTERRUPTED_REASON,
    PROCESS_EXIT_PLACEHOLDER,
    closing_records,
    read_trace,
    recover_shard,
    resume_trace,
    set_aside_torn_tail,
)
from omni_grpc.trace.validate import TraceValidator
from omni_grpc_proto.omni.v1 import agent_service_pb2 as pb
from omni_grpc_proto.omni.v1 import agent_service_pb2_grpc

META = protocol.session_meta(
    protocol.session_meta_payload("s1", "p", "m", 1, "", "", "/w"),
    timestamp="2026-01-01T00:00:00.000Z",
)


def _texts(messages: list[dict[str, Any]]) -> list[str]:
    out = []
    for m in messages:
        p = m["payload"]
        out.append(p.get("text") or p.get("output") or p.get("name") or p["type"])
    return out


def _turn(reply: str, status: str = "completed", *calls: str) -> list[dict[str, Any]]:
    out = [protocol.request_begin(), protocol.assistant_text(reply)]
    out += [protocol.tool_call("t", "{}", c) for c in calls]
    return [*out, protocol.request_end(status)]


def test_committed_turns_form_the_history_and_dropped_input_is_carried_over() -> None:
    trace = [
        META,
        protocol.user_text("one"),
        *_turn("reply one"),
        protocol.user_text("two"),
        *_turn("lost reply", "failed"),
    ]
    result = resume_trace(trace)
    assert result.meta == META
    assert _texts(result.history) == ["one", "reply one"]
    assert _texts(result.carry_over) == ["two"]
    assert result.session_turns == 1
    assert not result.context_closed


def test_a_request_without_its_end_is_an_uncommitted_turn() -> None:
    trace = [META, protocol.user_text("q"), protocol.request_begin(), protocol.assistant_text("x")]
    result = resume_trace(trace)
    assert result.history == []
    assert _texts(result.carry_over) == ["q"]


def test_a_committed_call_without_output_gets_the_placeholder() -> None:
    trace = [META, protocol.user_text("q"), *_turn("calling", "completed", "c1")]
    result = resume_trace(trace)
    assert [m["payload"]["type"] for m in result.history] == ["text", "text", "tool_call"]
    [placeholder] = result.carry_over
    assert placeholder["payload"]["output"] == PROCESS_EXIT_PLACEHOLDER
    assert placeholder["payload"]["stop_reason"] == "aborted"
    assert placeholder["payload"]["tool_call_id"] == "c1"


def test_an_output_of_a_dropped_call_is_never_resent() -> None:
    trace = [
        META,
        protocol.user_text("q"),
        *_turn("calling", "failed", "c1"),
        protocol.tool_call_output("done", "c1"),
    ]
    result = resume_trace(trace)
    assert _texts(result.carry_over) == ["q"]


def test_an_answered_call_enters_history_with_the_next_turn() -> None:
    trace = [
        META,
        protocol.user_text("q"),
        *_turn("calling", "completed", "c1"),
        protocol.tool_call_output("out", "c1"),
        *_turn("final"),
    ]
    result = resume_trace(trace)
    assert _texts(result.history) == ["q", "calling", "t", "out", "final"]
    assert result.carry_over == []
    assert result.session_turns == 2


def test_a_completed_compaction_closes_the_context() -> None:
    trace = [
        META,
        protocol.user_text("q"),
        *_turn("a"),
        protocol.compaction_begin("threshold", "summarize", 100, 1),
        *_turn("the summary"),
        protocol.compaction_end("threshold", "summarize", "completed"),
    ]
    result = resume_trace(trace)
    assert result.context_closed
    assert result.summary_text == "the summary"
    assert result.history == [] and result.carry_over == []


def test_token_figures_come_from_the_last_usage() -> None:
    counts = {"cache_read": 0, "cache_write": 0, "output": 3, "total": 9}
    trace = [META, protocol.token_usage(counts, {**counts, "total": 4})]
    result = resume_trace(trace)
    assert result.session_tokens == counts
    assert result.last_request_total == 4


# ---- closing an interrupted run ----------------------------------------------------


def _kinds(messages: list[dict[str, Any]]) -> list[str]:
    return [m["payload"]["type"] for m in messages]


def test_nothing_to_close_in_a_finished_run() -> None:
    trace = [META, protocol.user_text("q"), *_turn("a")]
    assert closing_records(trace) == []


def test_an_open_request_is_ended_aborted_then_aborted() -> None:
    trace = [META, protocol.user_text("q"), protocol.request_begin()]
    closing = closing_records(trace)
    assert _kinds(closing) == ["request_end", "abort"]
    assert closing[0]["payload"]["status"] == "aborted"
    assert closing[1]["payload"]["reason"] == INTERRUPTED_REASON


def test_unanswered_calls_and_a_dangling_compaction_are_closed() -> None:
    trace = [
        META,
        protocol.user_text("q"),
        *_turn("a", "completed", "c1", "c2"),
        protocol.tool_call_output("ok", "c1"),
        protocol.compaction_begin("threshold", "summarize", 10, 1),
        protocol.request_begin(),
    ]
    closing = closing_records(trace)
    assert _kinds(closing) == ["request_end", "compaction_end", "tool_call_output", "abort"]
    assert closing[1]["payload"]["status"] == "failed"
    assert closing[1]["payload"]["mode"] == "summarize"
    assert closing[2]["payload"]["tool_call_id"] == "c2"
    assert _issues(trace + closing) == []


def _issues(messages: list[dict[str, Any]]) -> list[Any]:
    validator = TraceValidator(trace=True)
    issues = []
    for line, msg in enumerate(messages, 1):
        issues += validator.check(line, msg)
    return issues + validator.finish()  # errors and warnings alike


def _write(path: Path, messages: list[dict[str, Any]], tail: bytes = b"") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = b"".join(serialize_message(message_from_dict(m)) + b"\n" for m in messages)
    path.write_bytes(lines + tail)


def test_a_torn_tail_is_set_aside_and_a_whole_unterminated_record_kept(tmp_path: Path) -> None:
    shard = tmp_path / "s_001.jsonl"
    _write(shard, [META], b'{"timestamp":"2026-01-01T00:00:00.000Z","type":"mod')
    assert set_aside_torn_tail(shard) > 0
    assert shard.read_bytes().endswith(b"\n")
    assert len(read_trace(shard)[0]) == 1
    assert (tmp_path / "s_001.jsonl.torn").read_bytes().startswith(b'{"timestamp"')

    whole = tmp_path / "w_001.jsonl"
    record = serialize_message(message_from_dict(protocol.user_text("kept")))
    _write(whole, [META], record)
    assert set_aside_torn_tail(whole) == 0
    assert whole.read_bytes().endswith(record + b"\n")
    assert len(read_trace(whole)[0]) == 2


def test_recovery_leaves_a_trace_that_validates(tmp_path: Path) -> None:
    shard = tmp_path / "s_001.jsonl"
    _write(
        shard,
        [META, protocol.user_text("q"), *_turn("a", "completed", "c1"), protocol.request_begin()],
        b'{"timestamp":"2026',
    )
    recovery = recover_shard(shard)
    records, skipped = read_trace(shard)
    assert skipped == []
    assert recovery.record_count == len(records)
    assert _kinds(recovery.closed) == ["request_end", "tool_call_output", "abort"]
    assert _issues(records) == []
    # Idempotent: a second restart finds nothing open.
    assert recover_shard(shard).closed == []


async def test_restore_counts_only_whole_records_and_the_next_run_validates(tmp_path: Path) -> None:
    data = tmp_path / "data"
    shard = data / "traces" / "2026-01-01" / "s1_001.jsonl"
    _write(shard, [META, protocol.user_text("q"), protocol.request_begin()], b'{"torn')
    # Resumption off: restore closes the open run (test_resumed_runs resumes it).
    hub = Hub(DemoEngine(), data, resume=ResumeLimits(runs=0))
    [info] = await hub.list_sessions()
    assert info.message_count == 5  # 3 records + request_end + abort; not the torn line
    from omni_grpc.runtime.hub import RunRequest

    _, sub = await hub.run(
        RunRequest(input=[message_from_dict(protocol.user_text("again"))], session_id="s1")
    )
    sub.close()
    await hub.wait_idle("s1")
    records, skipped = read_trace(shard)
    assert skipped == []
    assert _issues(records) == []
    assert (await hub.session_info("s1")).message_count == len(records)
    await hub.shutdown()


# ---- a real kill -9 --------------------------------------------------------------------


@pytest.mark.parametrize("resume_runs", ["0", "3"])
def test_kill_9_mid_run_then_restart_leaves_valid_traces(tmp_path: Path, resume_runs: str) -> None:
    """Killed mid-request and started again: with resumption off the restart
    closes the run; on (the default), it resumes it to its end first. Either
    way the next run works and the trace validates."""
    data = tmp_path / "data"
    cmd = [sys.executable, "-m", "omni_grpc", "serve", "--no-http", "--grpc-port", "0"]
    cmd += ["--data-dir", str(data), "--pacing", "0.05", "--resume-runs", resume_runs]

    def start() -> tuple[subprocess.Popen[str], str]:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        address = ""
        for line in proc.stdout:
            if "gRPC on grpc://" in line:
                address = line.split("grpc://")[1].strip()
            if line.strip() == "omni-grpc ready":
                return proc, address
        raise AssertionError(proc.stderr.read() if proc.stderr else "serve exited")

    proc, address = start()
    try:
        with grpc.insecure_channel(address) as channel:
            stub = agent_service_pb2_grpc.AgentServiceStub(channel)
            stream = stub.Run(pb.RunRequest(prompt="hello"))
            session_id = ""
            for response in stream:
                session_id = response.session_id
                # Mid-request: after the first streamed delta of the first request.
                if response.message.WhichOneof("payload") == "partial_text":
                    break
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            with pytest.raises(grpc.RpcError):
                for _ in stream:
                    pass
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()

    proc, address = start()
    try:
        with grpc.insecure_channel(address) as channel:
            stub = agent_service_pb2_grpc.AgentServiceStub(channel)
            [info] = stub.ListSessions(pb.ListSessionsRequest()).sessions
            assert info.session_id == session_id
            if resume_runs != "0":
                # The resumed run goes on to its end; the next waits for it.
                for response in stub.Attach(pb.AttachRequest(session_id=session_id)):
                    event = response.event
                    if event.HasField("task_state") and (
                        event.task_state.state == pb.SESSION_STATE_IDLE
                    ):
                        break
            for _ in stub.Run(pb.RunRequest(prompt="again", session_id=session_id)):
                pass
            history = list(stub.GetHistory(pb.GetHistoryRequest(session_id=session_id)))
            [info] = stub.ListSessions(pb.ListSessionsRequest()).sessions
            assert info.message_count == len(history)
    finally:
        proc.terminate()
        proc.wait(10)
    [shard] = (data / "traces").glob("*/*.jsonl")
    check = subprocess.run(
        [sys.executable, "-m", "omni_grpc", "validate", str(shard)],
        capture_output=True,
        text=True,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert "0 error(s), 0 warning(s)" in check.stdout, check.stdout
    assert (INTERRUPTED_REASON if resume_runs == "0" else RESUMED_REASON) in shard.read_text()


# ---- the class: any point a run can be cut at ----------------------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@st.composite
def runs(draw: st.DrawFn) -> list[dict[str, Any]]:
    """A session's records: turns with tool calls and their outputs, some
    failed requests, some compactions, as an engine writes them."""
    out: list[dict[str, Any]] = [META, protocol.user_text("start")]
    calls = 0
    for _ in range(draw(st.integers(1, 4))):
        compaction = draw(st.booleans())
        if compaction:
            out.append(protocol.compaction_begin("threshold", "summarize", 100, 1))
        out += [protocol.request_begin(), protocol.assistant_text("a")]
        ids = [f"c{calls + i}" for i in range(draw(st.integers(0, 3)))]
        calls += len(ids)
        out += [protocol.tool_call("t", "{}", c) for c in ids]
        status = draw(st.sampled_from(["completed", "completed", "failed"]))
        out.append(protocol.request_end(status))
        out += [protocol.tool_call_output("ok", c) for c in ids]
        if compaction:
            out.append(protocol.compaction_end("threshold", "summarize", status))
        out.append(protocol.user_text("next"))
    return out


@settings(max_examples=300, deadline=None)
@given(records=runs(), data=st.data())
def test_closing_any_cut_leaves_a_trace_that_validates(
    records: list[dict[str, Any]], data: st.DataObject
) -> None:
    cut = records[: data.draw(st.integers(1, len(records)), label="cut")]
    closing = closing_records(cut)
    assert _issues(cut + closing) == []
    assert closing_records(cut + closing) == []  # closed means nothing left open
    # Closing does not change what a resumed engine would send the model.
    before, after = resume_trace(cut), resume_trace(cut + closing)
    assert [m["payload"] for m in after.history] == [m["payload"] for m in before.history]
    assert [m["payload"] for m in after.carry_over] == [m["payload"] for m in before.carry_over]
