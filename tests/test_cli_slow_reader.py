"""``run --json`` and ``attach --json`` behind a stdout nobody reads for a
while (issue 29, item 5), as real processes against a real server.

The server lets a reader that stops reading go after its stall timeout and
drops what it had not read (``resync_required``), so the run itself is not
held up. The command must then either have printed every event or fail
loudly (exit 1, saying the output has a gap): it used to print about half
the partial events and exit 0.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from conftest import ServeProcess
from waiting import wait_for

ServeFactory = Callable[..., ServeProcess]
# Enough streamed text to outgrow the pipe, gRPC's windows and the server's
# small replay window many times over.
SERVE_ARGS = ("--no-http", "--engine-opt", "repeat=10000", "--buffer-events", "200")


def omni(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "omni_grpc", *args],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def states(target: str) -> dict[str, str]:
    shown = omni("sessions", "--target", target, "--json")
    return {row["session_id"]: row["state"] for row in map(json.loads, shown.stdout.splitlines())}


def streamed_and_complete(out: bytes) -> tuple[int, int]:
    """Characters of assistant text the partials carried, and those the
    complete text messages hold: equal when nothing was dropped."""
    streamed = complete = 0
    for line in out.splitlines():
        payload = json.loads(line)["payload"]
        if payload["type"] == "partial_text":
            streamed += len(payload.get("text", ""))
        elif payload["type"] == "text" and payload.get("role") == "assistant":
            complete += len(payload["text"])
    return streamed, complete


def check_no_silent_gap(done: subprocess.CompletedProcess[bytes], prog: str) -> None:
    streamed, complete = streamed_and_complete(done.stdout)
    assert complete > 0
    stderr = done.stderr.decode()
    if done.returncode == 0:
        assert streamed == complete, f"exit 0 with {complete - streamed} characters missing"
        return
    assert streamed < complete  # a gap it said, not a failure of its own
    assert done.returncode == 1, stderr
    assert f"{prog}: this reader fell behind and the server dropped events" in stderr
    assert f"{prog}: the output is incomplete" in stderr and "history" in stderr


def test_run_json_behind_a_stalled_stdout_never_drops_events_silently(
    serve_process: ServeFactory, tmp_path: Path
) -> None:
    served = serve_process("--data-dir", str(tmp_path / "data"), *SERVE_ARGS)
    cli = subprocess.Popen(
        [sys.executable, "-m", "omni_grpc", "run", "hi", "--target", served.grpc_address,
         "--json", "--approve", "allow"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    # Nobody reads stdout until the run is over on the server.
    wait_for(lambda: list(states(served.grpc_address).values()) == ["idle"],
             "the run did not finish while its reader stalled", limit=120)  # fmt: skip
    out, err = cli.communicate(timeout=120)
    check_no_silent_gap(subprocess.CompletedProcess(cli.args, cli.returncode, out, err),
                        "omni-grpc run")  # fmt: skip


def test_attach_json_behind_a_stalled_stdout_never_drops_events_silently(
    serve_process: ServeFactory, tmp_path: Path
) -> None:
    served = serve_process("--data-dir", str(tmp_path / "data"), *SERVE_ARGS)
    target = ["--target", served.grpc_address]
    # The task waits on its approval: attach joins it before anything streams.
    detached = omni("run", "hi", *target, "--approve", "ask", "--detach")
    session_id = detached.stdout.strip()
    cli = subprocess.Popen(
        [sys.executable, "-m", "omni_grpc", "attach", session_id, *target, "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert cli.stderr is not None
    assert cli.stderr.readline().startswith(b"approval pending:")  # attached
    assert omni("approve", session_id, "call_demo_1", "allow", *target).returncode == 0
    wait_for(lambda: states(served.grpc_address)[session_id] == "idle",
             "the run did not finish while its reader stalled", limit=120)  # fmt: skip
    out, err = cli.communicate(timeout=120)
    check_no_silent_gap(subprocess.CompletedProcess(cli.args, cli.returncode, out, err),
                        "omni-grpc attach")  # fmt: skip
