"""Units of resumption (runtime/resumption.py): what a resumed run is given,
when a task is not resumed again, which engines can be resumed."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from small_disk import SmallDisk

from omni_grpc import protocol as p
from omni_grpc.engines.command import CommandEngine
from omni_grpc.engines.demo import DemoEngine
from omni_grpc.engines.grpc_upstream import GrpcUpstreamEngine
from omni_grpc.engines.openai.engine import OpenAIEngine
from omni_grpc.engines.replay import ReplayEngine
from omni_grpc.engines.sse_upstream import SseUpstreamEngine
from omni_grpc.runtime.approvals import ApprovalMode
from omni_grpc.runtime.interface import RunRequest
from omni_grpc.runtime.resumption import (
    RESUMED_REASON,
    ResumeLimits,
    TaskOptions,
    carry_over,
    forget_options,
    load_options,
    marks,
    refusal,
    save_options,
)
from omni_grpc.runtime.run_guard import RunGuard
from omni_grpc.trace.resume import PROCESS_EXIT_PLACEHOLDER, resume_trace

Json = dict[str, Any]


def meta() -> Json:
    return p.session_meta(p.session_meta_payload("s", "omni-grpc", "demo", 1, "", "", "/w"))


def test_an_uncommitted_turn_s_input_is_carried_over_and_its_output_dropped() -> None:
    trace = [
        meta(),
        p.user_text("first"),
        p.request_begin(),
        p.assistant_text("partly"),
    ]
    guard = RunGuard()
    for item in trace:
        guard.observe(item)
    closing = marks(guard)
    kinds = [m["payload"]["type"] for m in closing]
    assert kinds == ["request_end"]  # no abort: the task goes on
    assert closing[0]["payload"]["status"] == "aborted"
    assert closing[0]["payload"]["error_message"] == RESUMED_REASON
    carried = carry_over(trace + closing)
    assert [m["payload"]["text"] for m in carried] == ["first"]
    assert resume_trace(trace + closing).history == []


def test_a_committed_call_without_output_gets_the_placeholder_and_nothing_is_carried() -> None:
    trace = [
        meta(),
        p.user_text("run it"),
        p.request_begin(),
        p.tool_call("shell", "{}", "call_1"),
        p.request_end("completed"),
    ]
    guard = RunGuard()
    for item in trace:
        guard.observe(item)
    guard.calls = {"call_1": "allow"}  # approved, running when the process was lost
    closing = marks(guard)
    assert [m["payload"]["type"] for m in closing] == ["tool_call_output"]
    assert closing[0]["payload"]["output"] == PROCESS_EXIT_PLACEHOLDER
    assert carry_over(trace + closing) == []
    # The reference's reader sends the placeholder with the next request.
    pending = resume_trace(trace + closing).carry_over
    assert [m["payload"]["output"] for m in pending] == [PROCESS_EXIT_PLACEHOLDER]


def test_a_task_resumed_too_often_or_too_late_is_refused_with_a_clear_reason() -> None:
    limits = ResumeLimits(runs=2, within=60.0)
    request = RunRequest(input=[])
    now = time.time()
    assert refusal(limits, TaskOptions(request, now, 0), now) is None
    assert refusal(limits, TaskOptions(request, now, 1), now) is None
    poison = refusal(limits, TaskOptions(request, now, 2), now)
    assert poison is not None and "interrupted 3 times" in poison
    late = refusal(limits, TaskOptions(request, now - 61, 0), now)
    assert late is not None and "60 s" in late
    # No start time known (a trace from before resumption): the count alone.
    assert refusal(limits, TaskOptions(request, 0.0, 0), now) is None
    assert not ResumeLimits(runs=0).enabled


def test_the_task_s_options_round_trip_beside_its_trace(tmp_path: Path) -> None:
    shard = tmp_path / "s_1.jsonl"
    request = RunRequest(
        input=[],
        thinking_level="high",
        approval_mode=ApprovalMode.ASK,
        metadata={"k": [1]},
        message_id="m1",
    )
    save_options(shard, TaskOptions(request, 12.5, 2))
    loaded = load_options(shard, "s")
    assert loaded.request.thinking_level == "high"
    assert loaded.request.approval_mode is ApprovalMode.ASK
    assert loaded.request.metadata == {"k": [1]}
    assert loaded.request.message_id == "m1"
    assert (loaded.started, loaded.resumed) == (12.5, 2)
    missing = load_options(tmp_path / "none.jsonl", "s")
    assert (missing.started, missing.resumed, missing.request.approval_mode) == (0.0, 0, None)


def test_options_a_full_disk_refuses_leave_neither_a_half_file_nor_the_last_task_s(
    small_disk: SmallDisk,
) -> None:
    """A full disk refuses the new task's options: the write raises and leaves
    no temporary file; forgetting the earlier task's options (the run's
    answer to that, run_task._save_options) needs no space, and a resumption
    then reads the defaults, never the earlier task's mode and count."""
    shard = small_disk.path / "s_1.jsonl"
    earlier = RunRequest(input=[], approval_mode=ApprovalMode.ASK, message_id="old")
    save_options(shard, TaskOptions(earlier, 1.0, 2))
    small_disk.fill()
    now = RunRequest(input=[], approval_mode=ApprovalMode.ALLOW_ALL, message_id="new" * 2000)
    with pytest.raises(OSError):
        save_options(shard, TaskOptions(now, 2.0))
    assert sorted(p.name for p in small_disk.path.iterdir()) == ["filler", "s_1.jsonl.run.json"]
    forget_options(shard)
    forget_options(shard)  # nothing left to forget: no error either
    loaded = load_options(shard, "s")
    assert (loaded.started, loaded.resumed, loaded.request.approval_mode) == (0.0, 0, None)
    # Set aside, not removed: the disk is exactly as full as before.
    assert sorted(p.name for p in small_disk.path.iterdir()) == [
        "filler", "s_1.jsonl.run.json.stale"
    ]  # fmt: skip
    small_disk.free()
    save_options(shard, TaskOptions(now, 2.0))  # the next write removes it
    assert sorted(p.name for p in small_disk.path.iterdir()) == ["s_1.jsonl.run.json"]
    assert load_options(shard, "s").request.message_id == "new" * 2000


def test_engines_declare_whether_they_can_be_resumed() -> None:
    assert DemoEngine.resumable
    assert OpenAIEngine.resumable
    assert ReplayEngine.resumable
    assert CommandEngine.resumable
    assert not GrpcUpstreamEngine.resumable
    assert not SseUpstreamEngine.resumable


def test_the_openai_engine_s_history_of_a_resumed_run_holds_the_prompt_once() -> None:
    from omni_grpc.engines.openai.history import drop_echoed_input, rebuild

    trace = [
        meta(),
        p.user_text("earlier"),
        p.request_begin(),
        p.assistant_text("earlier answer"),
        p.request_end("completed"),
        p.user_text("the prompt"),
        p.request_begin(),
        p.assistant_text("half an ans"),
    ]
    guard = RunGuard()
    for item in trace[5:]:
        guard.observe(item)
    resumed = trace + marks(guard)
    engine_input = carry_over(resumed)
    history = rebuild(resumed)
    drop_echoed_input(history, engine_input)
    items = history.items + [m["payload"] for m in engine_input]
    texts = [(i["role"], i.get("text")) for i in items]
    # The dropped turn's half answer is gone; its prompt is sent once.
    assert texts == [
        ("user", "earlier"),
        ("assistant", "earlier answer"),
        ("user", "the prompt"),
    ]
