"""``omni-grpc chat``: turn after turn in one session, as real processes
against a real ``omni-grpc serve``: stdin's lines off a terminal, and a
pseudo-terminal with an approval asked inline."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from conftest import ServeProcess

from omni_grpc.trace import read_jsonl

ServeFactory = Callable[..., ServeProcess]


def omni(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "omni_grpc", *args],
        capture_output=True, text=True, timeout=60, input=stdin,
        stdin=subprocess.DEVNULL if stdin is None else None,
    )  # fmt: skip


def user_texts(data: Path, session_id: str) -> list[str]:
    [trace] = list(data.glob(f"traces/*/{session_id}_*.jsonl"))
    return [
        r.message.text.text
        for r in read_jsonl(trace)
        if r.message.WhichOneof("payload") == "text" and r.message.text.role == 1
    ]


def test_chat_runs_each_line_in_one_session_and_continue_goes_on(
    serve_process: ServeFactory, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    served = serve_process("--data-dir", str(data), "--no-http")
    target = ["--target", served.grpc_address]
    done = omni("chat", *target, "--approve", "allow", stdin="first turn\n\nsecond turn\n")
    assert done.returncode == 0, done.stderr
    [session_id] = {line.split()[1] for line in done.stderr.splitlines()
                    if line.startswith("session ")}  # fmt: skip
    assert user_texts(data, session_id) == ["first turn", "second turn"]
    # Each turn rendered to its end, the second with the session's history.
    assert "'first turn'" in done.stdout and "'second turn'" in done.stdout
    assert "leaves the chat" not in done.stderr  # stdin's lines: nobody to tell
    # --continue: the most recently active session, here the only one.
    more = omni(
        "chat", *target, "--continue", "--approve", "allow", stdin="third\n/exit\nnot sent\n"
    )
    assert more.returncode == 0, more.stderr
    assert user_texts(data, session_id) == ["first turn", "second turn", "third"]
    listed = omni("sessions", *target, "--json").stdout.splitlines()
    assert [json.loads(line)["session_id"] for line in listed] == [session_id]


def test_chat_continue_with_no_session_is_a_usage_error(
    serve_process: ServeFactory, tmp_path: Path
) -> None:
    served = serve_process("--data-dir", str(tmp_path / "data"), "--no-http")
    done = omni("chat", "--target", served.grpc_address, "--continue", stdin="hi\n")
    assert done.returncode == 2
    assert "no session to continue" in done.stderr


def test_chat_on_a_terminal_asks_about_tool_calls_inline(
    serve_process: ServeFactory, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    served = serve_process("--data-dir", str(data), "--no-http")
    pid, fd = pty.fork()
    if pid == 0:  # the child: chat on the terminal
        os.execv(sys.executable, [sys.executable, "-m", "omni_grpc", "chat",
                                  "--target", served.grpc_address])  # fmt: skip
    seen = b""
    start = 0  # where the next marker is looked for

    def read_until(marker: bytes) -> None:
        nonlocal seen, start
        while marker not in seen[start:]:
            ready, _, _ = select.select([fd], [], [], 60)
            assert ready, seen.decode(errors="replace")
            seen += os.read(fd, 4096)
        start = seen.index(marker, start) + len(marker)

    read_until(b"you> ")
    # How to leave is said before the first prompt, and only on a terminal.
    assert b"Ctrl-D or /exit leaves the chat" in seen[: seen.index(b"you> ")]
    os.write(fd, b"list my files\n")
    read_until(b"Allow this tool call? [y/n]: ")
    os.write(fd, b"y\n")
    read_until(b"approval: allow")
    read_until(b"you> ")
    os.write(fd, b"\x04")  # Ctrl-D ends the chat
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    assert os.waitstatus_to_exitcode(status) == 0, seen.decode(errors="replace")
    assert b"output [call_demo_1]" in seen
