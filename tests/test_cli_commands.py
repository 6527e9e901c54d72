"""The client commands beside ``run`` (sessions, history, attach, approve,
abort, run --detach) and the command line's usage errors, as real processes
against a real ``omni-grpc serve``."""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import pty
import re
import select
import shlex
import signal
import subprocess
import sys
import termios
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import ServeProcess
from waiting import wait_for

from omni_grpc.cli import build_parser
from omni_grpc.client import AgentClient
from omni_grpc.trace import read_jsonl

ServeFactory = Callable[..., ServeProcess]
CLIENT_COMMANDS = {
    "run": ["x"],
    "attach": ["SID"],
    "sessions": [],
    "history": ["SID"],
    "approve": ["SID", "CALL", "allow"],
    "abort": ["SID"],
}


def omni(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "omni_grpc", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def trace_of(data: Path, session_id: str) -> list[Path]:
    return sorted(data.glob(f"traces/*/{session_id}_*.jsonl"))


def last_kind(data: Path, session_id: str) -> str | None:
    shards = trace_of(data, session_id)
    records = list(read_jsonl(shards[-1], tolerant=True)) if shards else []
    return records[-1].message.WhichOneof("payload") if records else None


@pytest.mark.parametrize("command", sorted(CLIENT_COMMANDS))
def test_every_client_command_takes_the_connection_options(command: str) -> None:
    shown = omni(command, "--help")
    assert shown.returncode == 0
    flags = set(shown.stdout.replace(",", " ").split())
    assert {"--target", "--token", "--tls", "--tls-ca", "--tls-cert", "--tls-key"} <= flags
    assert "exit status:" in shown.stdout
    # The same checks as run's, before any connection is tried.
    half = omni(command, *CLIENT_COMMANDS[command], "--tls-cert", "c.pem")
    assert half.returncode == 2
    assert half.stderr == f"omni-grpc {command}: --tls-cert and --tls-key go together\n"


def test_history_json_is_the_trace_file_byte_for_byte(
    serve_process: ServeFactory, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    served = serve_process("--data-dir", str(data), "--no-http", "--auth-token", "tok")
    target = ["--target", served.grpc_address, "--token", "tok"]
    first = omni("run", "first turn", *target, "--approve", "deny", "--json")
    assert first.returncode == 0, first.stderr
    session_id = first.stderr.split("session ", 1)[1].split()[0]
    second = omni("run", "sécond turn ✓", *target, "--session", session_id, "--json")
    assert second.returncode == 0, second.stderr
    history = subprocess.run(
        [sys.executable, "-m", "omni_grpc", "history", session_id, *target, "--json"],
        capture_output=True,
        timeout=60,
    )
    assert history.returncode == 0, history.stderr
    trace = b"".join(shard.read_bytes() for shard in trace_of(data, session_id))
    assert history.stdout == trace
    shown = omni("history", session_id, *target)
    assert shown.returncode == 0, shown.stderr
    assert "> first turn" in shown.stdout and "> sécond turn ✓" in shown.stdout
    assert "approval: deny [call_demo_1]" in shown.stdout
    # The token is required like run's: without it the call is refused (exit 3).
    refused = omni("history", session_id, "--target", served.grpc_address)
    assert refused.returncode == 3 and "UNAUTHENTICATED" in refused.stderr
    missing = omni("history", "session-nope", *target)
    assert missing.returncode == 3 and "NOT_FOUND" in missing.stderr


def test_history_tail_prints_the_newest_tasks_byte_for_byte(
    serve_process: ServeFactory, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    served = serve_process("--data-dir", str(data), "--no-http")
    target = ["--target", served.grpc_address]
    first = omni("run", "first turn", *target, "--json")
    assert first.returncode == 0, first.stderr
    session_id = first.stderr.split("session ", 1)[1].split()[0]
    for prompt in ("second turn", "third turn"):
        done = omni("run", prompt, *target, "--session", session_id, "--json")
        assert done.returncode == 0, done.stderr
    [shard] = trace_of(data, session_id)
    lines = shard.read_bytes().splitlines(keepends=True)
    prompts = (b'"first turn"', b'"second turn"', b'"third turn"')
    starts = [next(i for i, line in enumerate(lines) if p in line) for p in prompts]
    for n in (1, 2):
        tail = subprocess.run(
            [
                sys.executable,
                "-m",
                "omni_grpc",
                "history",
                session_id,
                *target,
                "--json",
                "--tail",
                str(n),
            ],
            capture_output=True,
            timeout=60,
        )
        assert tail.returncode == 0, tail.stderr
        assert tail.stdout == b"".join(lines[starts[-n] :])
    shown = omni("history", session_id, *target, "--tail", "1")
    assert shown.returncode == 0, shown.stderr
    assert "> third turn" in shown.stdout and "first turn" not in shown.stdout
    everything = omni("history", session_id, *target, "--tail", "50")
    assert "> first turn" in everything.stdout  # fewer tasks than asked: all of them
    for bad in ("0", "-1", "x"):
        refused = omni("history", session_id, *target, "--tail", bad)
        assert refused.returncode == 2 and "--tail" in refused.stderr


def test_sessions_lists_newest_first_with_state(
    serve_process: ServeFactory, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    served = serve_process("--data-dir", str(data), "--no-http")
    target = ["--target", served.grpc_address]
    done = omni("run", "old", *target, "--approve", "allow", "--json")
    assert done.returncode == 0, done.stderr
    old_id = done.stderr.split("session ", 1)[1].split()[0]
    # Asked about its tool call, with nobody to answer: it stays running.
    detached = omni("run", "new", *target, "--approve", "ask", "--detach")
    assert detached.returncode == 0, detached.stderr
    new_id = detached.stdout.strip()
    listed = omni("sessions", *target, "--json")
    assert listed.returncode == 0, listed.stderr
    rows = [json.loads(line) for line in listed.stdout.splitlines()]
    assert [(r["session_id"], r["state"]) for r in rows] == [
        (new_id, "running"), (old_id, "idle"),
    ]  # fmt: skip
    assert rows[1]["message_count"] == len(list(read_jsonl(trace_of(data, old_id)[0])))
    table = omni("sessions", *target).stdout.splitlines()
    assert table[0].split()[:2] == ["SESSION", "STATE"]
    assert [line.split()[:2] for line in table[1:]] == [[new_id, "running"], [old_id, "idle"]]
    assert omni("abort", new_id, *target).returncode == 0


def test_detach_then_attach_approve_and_finish(serve_process: ServeFactory, tmp_path: Path) -> None:
    data = tmp_path / "data"
    served = serve_process("--data-dir", str(data), "--no-http")
    target = ["--target", served.grpc_address]
    detached = omni("run", "hold on", *target, "--approve", "ask", "--detach", "--json")
    assert detached.returncode == 0, detached.stderr
    # --json: the session as one JSON object (the keys of `sessions --json`).
    session_id = json.loads(detached.stdout)["session_id"]
    assert detached.stdout == json.dumps({"session_id": session_id}) + "\n"
    # The task keeps running without its caller: it waits for the approval.
    wait_for(lambda: last_kind(data, session_id) == "tool_call", "the task did not go on")
    attach = subprocess.Popen(
        [sys.executable, "-m", "omni_grpc", "attach", session_id, *target],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    assert attach.stderr is not None
    # Off a terminal, attach names the command that answers the pending request,
    # with the server it is attached to: pasted as shown, it reaches that server.
    notice = attach.stderr.readline()
    prefix = "approval pending: omni-grpc "
    assert notice.startswith(prefix), notice
    shown = shlex.split(notice[len(prefix) :])
    assert shown == ["approve", session_id, "call_demo_1", "allow|deny", *target]
    wrong = omni("approve", session_id, "call_nope", "allow", *target)
    assert wrong.returncode == 3 and "NOT_FOUND" in wrong.stderr
    approved = omni(*["allow" if word == "allow|deny" else word for word in shown])
    assert approved.returncode == 0, approved.stderr
    out, err = attach.communicate(timeout=60)
    assert attach.returncode == 0, err
    assert "approval: allow [call_demo_1]" in out
    assert "output [call_demo_1]" in out and "The workspace holds" in out
    [row] = [json.loads(line) for line in omni("sessions", *target, "--json").stdout.splitlines()]
    assert row["state"] == "idle"
    # Nothing is running now: abort says so and exits 1.
    idle = omni("abort", session_id, *target)
    assert idle.returncode == 1 and "is idle: nothing to abort" in idle.stderr


def test_abort_stops_a_running_task(serve_process: ServeFactory, tmp_path: Path) -> None:
    data = tmp_path / "data"
    served = serve_process("--data-dir", str(data), "--no-http", "--pacing", "0.2")
    target = ["--target", served.grpc_address]
    detached = omni("run", "long one", *target, "--detach")
    session_id = detached.stdout.strip()
    stopped = omni("abort", session_id, *target, "--reason", "changed my mind")
    assert stopped.returncode == 0, stopped.stderr
    wait_for(lambda: last_kind(data, session_id) == "abort", "the task was not aborted")
    [trace] = trace_of(data, session_id)
    assert list(read_jsonl(trace))[-1].message.abort.reason == "changed my mind"


async def _events_of_a_run(target: str) -> tuple[str, list[tuple[str, bytes]]]:
    async with AgentClient(target) as client:
        seen = []
        async for event in client.run("replay me", approval_mode="allow-all"):
            seen.append((event.event_id, event.to_json() if event.message else b""))
            if event.is_task_end:
                return event.session_id, seen
    raise AssertionError("no task end")


def test_attach_after_an_id_replays_exactly_what_followed(serve_process: ServeFactory) -> None:
    served = serve_process("--no-http")
    target = ["--target", served.grpc_address]
    session_id, seen = asyncio.run(_events_of_a_run(served.grpc_address))
    messages = [i for i, (_, line) in enumerate(seen) if line]
    for cut in (messages[0], messages[len(messages) // 2], messages[-1]):
        after = seen[cut][0]
        replayed = omni("attach", session_id, "--after", after, *target, "--json")
        assert replayed.returncode == 0, replayed.stderr
        expected = [line.decode() for _, line in seen[cut + 1 :] if line]
        assert replayed.stdout.splitlines() == expected, after


_TGKILL = {"x86_64": 234, "aarch64": 131}.get(os.uname().machine)


def _interrupt_another_thread(pid: int) -> None:
    """SIGINT to one of the process's threads other than the main one, as the
    kernel may choose when Ctrl-C reaches a process that runs gRPC's threads."""
    import ctypes

    others = sorted(int(t) for t in os.listdir(f"/proc/{pid}/task") if int(t) != pid)
    assert others, "the client runs no other thread"
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.syscall(_TGKILL, pid, others[0], signal.SIGINT) == 0, ctypes.get_errno()


@pytest.mark.parametrize("how", ["ctrl-c", "sigint-to-another-thread"])
def test_ctrl_c_at_the_approval_prompt_exits_130_at_once(
    serve_process: ServeFactory, tmp_path: Path, how: str
) -> None:
    """Through a real terminal: Ctrl-C is the terminal's interrupt character,
    turned into SIGINT by the kernel for the foreground process group."""
    if how != "ctrl-c" and _TGKILL is None:
        pytest.skip(f"no tgkill number known for {os.uname().machine}")
    data = tmp_path / "data"
    served = serve_process("--data-dir", str(data), "--no-http")
    master, slave = pty.openpty()

    def controlling_terminal() -> None:
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    proc = subprocess.Popen(
        [sys.executable, "-m", "omni_grpc", "run", "may I?", "--target", served.grpc_address,
         "--approve", "ask"],
        stdin=slave, stdout=slave, stderr=slave, start_new_session=True,
        preexec_fn=controlling_terminal, env={**os.environ, "COLUMNS": "100"},
    )  # fmt: skip
    os.close(slave)
    output = b""
    try:
        deadline = time.monotonic() + 60
        while b"Allow this tool call?" not in output:
            assert time.monotonic() < deadline, output.decode(errors="replace")
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                output += os.read(master, 4096)
        if how == "ctrl-c":
            os.write(master, b"\x03")  # Ctrl-C, and nothing after it: no Enter
        else:
            _interrupt_another_thread(proc.pid)
        code = proc.wait(30)
        with_rest = output
        while select.select([master], [], [], 0.2)[0]:
            try:
                chunk = os.read(master, 4096)
            except OSError:
                break
            if not chunk:
                break
            with_rest += chunk
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    assert code == 130, with_rest.decode(errors="replace")
    # On a line of its own, not after the unanswered "[y/n]: ^C".
    own_line = rb"[\r\n](\x1b\[[0-9;]*m)*interrupted: the run was aborted"
    assert re.search(own_line, with_rest), with_rest
    [trace] = list(data.glob("traces/*/*.jsonl"))
    wait_for(lambda: list(read_jsonl(trace))[-1].message.WhichOneof("payload") == "abort",
             "the run was not aborted")  # fmt: skip


def test_a_server_dying_mid_line_leaves_no_half_printed_line(
    serve_process: ServeFactory, tmp_path: Path
) -> None:
    served = serve_process("--no-http", "--pacing", "0.3", "--data-dir", str(tmp_path / "d"))
    runner = subprocess.Popen(
        [sys.executable, "-m", "omni_grpc", "run", "one two three four five six seven",
         "--target", served.grpc_address, "--approve", "allow"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert runner.stdout is not None
    # Wait until the streamed thinking has printed part of a line.
    got = b""
    while not got or got.endswith(b"\n"):
        chunk = os.read(runner.stdout.fileno(), 4096)
        assert chunk, "the run ended before streaming"
        got += chunk
    served.process.send_signal(signal.SIGKILL)
    rest, err = runner.communicate(timeout=60)
    out = got + rest
    assert runner.returncode == 3, err
    assert out.endswith(b"\n")
    [line] = err.decode().splitlines()
    assert line.startswith("omni-grpc run: UNAVAILABLE")


@pytest.mark.parametrize("command", ["serve", *sorted(CLIENT_COMMANDS), "convert", "validate"])
def test_a_misspelt_flag_shows_that_commands_usage(command: str) -> None:
    positionals = {"convert": ["a.jsonl", "b.binpb"], "validate": ["a.jsonl"]}
    args = CLIENT_COMMANDS.get(command, positionals.get(command, []))
    done = omni(command, *args, "--no-such-flag")
    assert done.returncode == 2
    assert done.stderr.startswith(f"usage: omni-grpc {command} ")
    assert done.stderr.endswith(
        f"omni-grpc {command}: error: unrecognized arguments: --no-such-flag\n"
    )


def test_a_misspelt_flags_value_is_not_taken_as_a_positional(tmp_path: Path) -> None:
    (tmp_path / "a").write_text("")
    done = subprocess.run(
        [sys.executable, "-m", "omni_grpc", "convert", "--frm", "jsonl", "a", "b"],
        capture_output=True, text=True, cwd=tmp_path, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.startswith("usage: omni-grpc convert ")
    assert done.stderr.endswith(
        "omni-grpc convert: error: unrecognized arguments: --frm (did you mean --from?)\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a"]  # nothing was written


def test_help_lists_every_command() -> None:
    shown = build_parser().format_help()
    for name in ("serve", "run", "attach", "sessions", "history", "approve", "abort",
                 "convert", "validate"):  # fmt: skip
        assert f"    {name} " in shown, name


def test_the_client_commands_speak_tls_and_mtls(serve_process: ServeFactory, certs: Path) -> None:
    served = serve_process("--no-http", "--tls-cert", str(certs / "server.pem"),
                           "--tls-key", str(certs / "server.key"),
                           "--tls-client-ca", str(certs / "ca.pem"))  # fmt: skip
    mtls = ["--tls-ca", str(certs / "ca.pem"), "--tls-cert", str(certs / "client.pem"),
            "--tls-key", str(certs / "client.key")]  # fmt: skip
    target = ["--target", served.grpc_address]
    detached = omni("run", "over tls", *target, *mtls, "--detach")
    assert detached.returncode == 0, detached.stderr
    session_id = detached.stdout.strip()
    followed = omni("attach", session_id, *target, *mtls, "--json")
    assert followed.returncode == 0, followed.stderr
    listed = omni("sessions", *target, *mtls, "--json")
    assert [json.loads(line)["session_id"] for line in listed.stdout.splitlines()] == [session_id]
    assert omni("history", session_id, *target, *mtls, "--json").returncode == 0
    # Without a client certificate, or without TLS at all, the call fails: exit 3.
    for args in (["--tls-ca", str(certs / "ca.pem")], []):
        refused = omni("sessions", *target, *args)
        assert refused.returncode == 3, refused.stderr
        assert refused.stderr.startswith("omni-grpc sessions: UNAVAILABLE")


def test_attach_on_a_terminal_asks_about_the_pending_approval(
    serve_process: ServeFactory, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    served = serve_process("--data-dir", str(data), "--no-http")
    target = ["--target", served.grpc_address]
    session_id = omni("run", "ask me later", *target, "--approve", "ask", "--detach").stdout.strip()
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "omni_grpc", "attach", session_id, *target],
        stdin=slave, stdout=slave, stderr=slave, env={**os.environ, "COLUMNS": "100"},
    )  # fmt: skip
    os.close(slave)
    output = b""
    try:
        deadline = time.monotonic() + 60
        while b"Allow this tool call?" not in output:
            assert time.monotonic() < deadline, output.decode(errors="replace")
            if select.select([master], [], [], 0.5)[0]:
                output += os.read(master, 4096)
        os.write(master, b"y\n")
        while proc.poll() is None or select.select([master], [], [], 0.2)[0]:
            assert time.monotonic() < deadline, output.decode(errors="replace")
            if select.select([master], [], [], 0.2)[0]:
                try:
                    chunk = os.read(master, 4096)
                except OSError:
                    break
                if not chunk:
                    break
                output += chunk
        code = proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    text = output.decode(errors="replace")
    assert code == 0, text
    assert "approve list_workspace [call_demo_1]?" in text
    assert "approval: allow [call_demo_1]" in text and "The workspace holds" in text
