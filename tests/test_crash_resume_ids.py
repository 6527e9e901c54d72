"""A trace left by a crash, then two more tasks, resumed with the reference rules.

A real ``omni-grpc serve`` runs a task that stops at its approval (the
tool_call is recorded, nothing after it) and is killed with SIGKILL. A second
server on the same data directory closes the interrupted run and runs two
more tasks. ``trace/resume.py`` (the project's port of the reference
``resumeTrace``) keeps a tool output only for a committed, still unanswered
call of its id, so every later task's output must survive the resume: which
needs tool call ids unique within the session across tasks and restarts.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from omni_grpc.trace.resume import read_trace, resume_trace


async def run_task(http: httpx.AsyncClient, sid: str, prompt: str) -> None:
    r = await http.post(f"/api/sessions/{sid}/tasks", json={"prompt": prompt})
    assert r.status_code == 202, r.text
    for _ in range(1000):
        info = (await http.get(f"/api/sessions/{sid}")).json()["session"]
        if info["status"] == "idle":
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"task {prompt!r} did not finish")


def tool_pairs(messages: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    calls = [
        m["payload"]["tool_call_id"] for m in messages if m["payload"].get("type") == "tool_call"
    ]
    outputs = [
        m["payload"]["tool_call_id"]
        for m in messages
        if m["payload"].get("type") == "tool_call_output"
    ]
    return calls, outputs


async def test_tasks_after_a_crash_keep_their_tool_outputs_on_resume(
    tmp_path: Path, serve_process: Callable[..., Any]
) -> None:
    data = tmp_path / "data"
    first = serve_process("--data-dir", str(data), "--approval-mode", "ask")
    async with httpx.AsyncClient(base_url=f"http://{first.http_address}", timeout=10) as http:
        sid = (await http.post("/api/sessions", json={})).json()["session"]["sessionId"]
        r = await http.post(f"/api/sessions/{sid}/tasks", json={"prompt": "crash during me"})
        assert r.status_code == 202

        # The run waits for its approval: the tool_call is in the trace.
        async def asked() -> bool:
            session = (await http.get(f"/api/sessions/{sid}")).json()["session"]
            return bool(session["pendingApprovalCount"] == 1)

        for _ in range(500):
            if await asked():
                break
            await asyncio.sleep(0.02)
        else:
            raise AssertionError("the first task never asked for its approval")
        trace = Path((await http.get(f"/api/sessions/{sid}")).json()["session"]["tracePath"])
    os.kill(first.process.pid, signal.SIGKILL)
    first.process.wait(10)
    crashed = trace.read_text().splitlines()
    assert json.loads(crashed[-1])["payload"]["type"] == "tool_call"  # killed mid-task

    # Resumption off: the restart closes the interrupted run (the ids are the point).
    second = serve_process("--data-dir", str(data), "--resume-runs", "0")
    async with httpx.AsyncClient(base_url=f"http://{second.http_address}", timeout=10) as http:
        await run_task(http, sid, "after the crash")
        await run_task(http, sid, "and once more")
        info = (await http.get(f"/api/sessions/{sid}")).json()["session"]
        assert info["tracePath"] == str(trace) and info["lastEventId"] is not None

    records, skipped = read_trace(trace)
    assert skipped == []
    calls, outputs = tool_pairs(records)
    assert len(calls) == 3 and len(set(calls)) == 3, calls  # one per task, none reused
    # The restart closed the killed run, the placeholder answering its call.
    assert outputs == calls
    closing = [m["payload"]["type"] for m in records[len(crashed) : len(crashed) + 3]]
    assert closing == ["request_end", "tool_call_output", "abort"], closing

    resumed = resume_trace(records)
    history_calls, history_outputs = tool_pairs(resumed.history)
    # The two later tasks committed their calls; each keeps its real output.
    assert history_calls == calls[1:]
    assert history_outputs == calls[1:]
    listings = [
        m["payload"]["output"]
        for m in resumed.history
        if m["payload"].get("type") == "tool_call_output"
    ]
    assert all(not text.startswith("[interrupted") for text in listings), listings
    assert resumed.carry_over == []

    # validate agrees: no id is used twice, every output has its call.
    checked = subprocess.run(
        [sys.executable, "-m", "omni_grpc", "validate", str(trace)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr

    # The same trace with one id in every task, as the demo engine used to
    # write it, loses a later task's output on resume: the failure this
    # guards against.
    reused = [with_call_id(m, "call_demo_1") for m in records]
    _, kept = tool_pairs(resume_trace(reused).history)
    assert len(kept) < 2, kept


def with_call_id(message: dict[str, Any], call_id: str) -> dict[str, Any]:
    copy = json.loads(json.dumps(message))
    if "tool_call_id" in copy["payload"]:
        copy["payload"]["tool_call_id"] = call_id
    return copy
