"""A session's files on disk (issue 29, item 7), as real processes: a
refused creation leaves no workspace behind, and a session created without a
run comes back after a restart on the memory backend (it used to vanish while
its workspace stayed)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import httpx
from conftest import ServeProcess

from omni_grpc.trace import read_jsonl

ServeFactory = Callable[..., ServeProcess]


def omni(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "omni_grpc", *args],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def workspaces(data: Path) -> list[str]:
    folder = data / "workspaces"
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def listed(target: str) -> list[str]:
    shown = omni("sessions", "--target", target, "--json")
    assert shown.returncode == 0, shown.stderr
    return sorted(json.loads(line)["session_id"] for line in shown.stdout.splitlines())


def test_refused_creations_leave_no_workspace(serve_process: ServeFactory, tmp_path: Path) -> None:
    data = tmp_path / "data"
    served = serve_process("--data-dir", str(data), "--max-sessions", "2")
    base = f"http://{served.http_address}"
    answers = [httpx.post(f"{base}/api/sessions", json={}, timeout=30) for _ in range(40)]
    made = [a.json()["session"]["sessionId"] for a in answers if a.status_code < 300]
    assert len(made) == 2
    assert {a.status_code for a in answers[2:]} == {429}, {a.status_code for a in answers}
    for _ in range(5):  # and Runs that would need a new session
        refused = omni("run", "hi", "--target", served.grpc_address)
        assert refused.returncode == 3 and "RESOURCE_EXHAUSTED" in refused.stderr
    assert workspaces(data) == sorted(made)
    assert listed(served.grpc_address) == sorted(made)


def test_a_session_created_without_a_run_survives_a_restart(
    serve_process: ServeFactory, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    served = serve_process("--data-dir", str(data))
    created = httpx.post(f"http://{served.http_address}/api/sessions", json={}, timeout=30)
    assert created.status_code < 300, created.text
    session_id = created.json()["session"]["sessionId"]
    assert workspaces(data) == [session_id]
    served.process.send_signal(signal.SIGTERM)
    assert served.process.wait(timeout=60) == 0

    again = serve_process("--data-dir", str(data))
    assert listed(again.grpc_address) == [session_id]
    ran = omni("run", "hi", "--target", again.grpc_address, "--session", session_id)
    assert ran.returncode == 0, ran.stderr
    [trace] = list(data.glob(f"traces/*/{session_id}_*.jsonl"))
    records = list(read_jsonl(trace))
    # The trace opens as any other: session_meta first, written by the first run.
    assert records[0].message.WhichOneof("payload") == "session_meta"
    assert records[0].message.session_meta.session_id == session_id
    assert workspaces(data) == [session_id]
