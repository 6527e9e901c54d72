"""``omni-grpc sessions rm``: deleting sessions from the command line, as real
processes against a real ``omni-grpc serve``, and ``AgentClient.delete_session``
beneath it."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from conftest import ServeProcess
from waiting import wait_for

ServeFactory = Callable[..., ServeProcess]


def omni(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "omni_grpc", *args],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def listed(target: list[str]) -> list[str]:
    shown = omni("sessions", *target, "--json")
    assert shown.returncode == 0, shown.stderr
    return [json.loads(line)["session_id"] for line in shown.stdout.splitlines()]


def test_rm_deletes_idle_and_running_sessions_and_frees_max_sessions(
    serve_process: ServeFactory, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    served = serve_process("--data-dir", str(data), "--no-http", "--max-sessions", "2")
    target = ["--target", served.grpc_address]
    done = omni("run", "first", *target, "--approve", "allow", "--detach")
    idle_id = done.stdout.strip()
    wait_for(lambda: dict(s.split()[:2] for s in omni("sessions", *target).stdout.splitlines()[1:])
             .get(idle_id) == "idle", "the first task did not finish")  # fmt: skip
    # Asked about its tool call with nobody to answer: it stays running.
    held = omni("run", "second", *target, "--approve", "ask", "--detach")
    running_id = held.stdout.strip()
    full = omni("run", "third", *target, "--approve", "allow")
    assert full.returncode == 3 and "RESOURCE_EXHAUSTED" in full.stderr, full.stderr

    # The connection flags work before `rm` as after it.
    removed = omni("sessions", *target, "rm", idle_id, "--json")
    assert removed.returncode == 0, removed.stderr
    assert json.loads(removed.stdout) == {
        "session_id": idle_id, "was_running": False, "trace_deleted": False,
    }  # fmt: skip
    assert f"deleted session {idle_id} (trace kept under deleted/)" in removed.stderr
    assert list((data / "deleted").rglob(f"{idle_id}_*.jsonl"))

    removed = omni("sessions", "rm", running_id, "--delete-trace", *target)
    assert removed.returncode == 0, removed.stderr
    assert "its running task was aborted" in removed.stderr
    assert not list(data.rglob(f"{running_id}_*.jsonl"))
    assert listed(target) == []
    # The two places are free again.
    again = omni("run", "third", *target, "--approve", "allow")
    assert again.returncode == 0, again.stderr


def test_rm_tries_every_id_and_fails_for_an_unknown_one(
    serve_process: ServeFactory, tmp_path: Path
) -> None:
    served = serve_process("--data-dir", str(tmp_path / "data"), "--no-http")
    target = ["--target", served.grpc_address]
    known = omni("run", "hi", *target, "--approve", "allow", "--detach").stdout.strip()
    removed = omni("sessions", "rm", "no-such-session", known, *target)
    assert removed.returncode == 3
    assert "omni-grpc sessions rm: no-such-session: NOT_FOUND" in removed.stderr
    assert f"deleted session {known}" in removed.stderr
    assert listed(target) == []
    # Deleting it twice is an error too, not a quiet success.
    twice = omni("sessions", "rm", known, *target)
    assert twice.returncode == 3 and "NOT_FOUND" in twice.stderr


def test_rm_needs_a_session_id() -> None:
    refused = omni("sessions", "rm")
    assert refused.returncode == 2
    assert "the following arguments are required: SID" in refused.stderr
