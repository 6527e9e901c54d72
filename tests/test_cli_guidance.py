"""The CLI tells a person what to do: a server that is not there, a token
that is missing, the event ids ``attach --after`` needs, a prompt piped in.

Real ``omni-grpc`` processes against a real ``omni-grpc serve``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from conftest import ServeProcess

from omni_grpc.event_ids import parse_event_id

ServeFactory = Callable[..., ServeProcess]
OMNI = [sys.executable, "-m", "omni_grpc"]


def omni(
    *args: str, stdin: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*OMNI, *args], capture_output=True, text=True, timeout=60, input=stdin,
        stdin=subprocess.DEVNULL if stdin is None else None, env={**os.environ, **(env or {})},
    )  # fmt: skip


def closed_port() -> int:
    with socket.socket() as sock:  # bound, never listening: connections are refused
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_server_that_is_not_there_is_named_with_what_to_do() -> None:
    port = closed_port()
    for args, env in (
        (["--target", f"127.0.0.1:{port}"], {}),
        ([], {"OMNI_TARGET": f"grpc://127.0.0.1:{port}"}),
    ):
        for verb in (["abort", "SID"], ["sessions"], ["run", "hi"]):
            done = omni(*verb, *args, env=env)
            assert done.returncode == 3, done.stderr  # the call failed (cli/exits.py)
            status, hint = done.stderr.splitlines()
            assert status.startswith(f"omni-grpc {verb[0]}: UNAVAILABLE: ")
            assert hint == (
                f"omni-grpc {verb[0]}: nothing answered at 127.0.0.1:{port}: is `omni-grpc "
                f"serve` running? Give the gRPC address it prints with --target (default "
                f"$OMNI_TARGET, else 127.0.0.1:50051)"
            )


def test_a_missing_token_is_named(serve_process: ServeFactory) -> None:
    served = serve_process("--no-http", "--auth-token", "s3cret")
    target = ["--target", served.grpc_address]
    done = omni("sessions", *target, env={"OMNI_AUTH_TOKEN": ""})
    assert done.returncode == 3
    assert done.stderr.splitlines()[1] == (
        f"omni-grpc sessions: the server at {served.grpc_address} wants a bearer token (no "
        f"token was given): pass --token or set $OMNI_AUTH_TOKEN"
    )
    wrong = omni("sessions", *target, "--token", "nope")
    assert "(the token given was refused)" in wrong.stderr
    assert omni("sessions", *target, "--token", "s3cret").returncode == 0


def test_run_reads_its_prompt_from_a_pipe(serve_process: ServeFactory, tmp_path: Path) -> None:
    data = tmp_path / "data"
    served = serve_process("--no-http", "--data-dir", str(data))
    done = omni("run", "--target", served.grpc_address, "--approve", "allow", "--json",
                stdin="a prompt\nof two lines\n")  # fmt: skip
    assert done.returncode == 0, done.stderr
    texts = [json.loads(line)["payload"] for line in done.stdout.splitlines()]
    assert {"type": "text", "role": "user", "text": "a prompt\nof two lines"} in [
        {k: p.get(k) for k in ("type", "role", "text")} for p in texts
    ]
    empty = omni("run", "--target", served.grpc_address, stdin="")
    assert empty.returncode == 2
    assert empty.stderr == "omni-grpc run: the prompt read from stdin is empty\n"


def test_ids_give_attach_after_its_ids(serve_process: ServeFactory, tmp_path: Path) -> None:
    """``attach --ids`` shows the ids; one of them resumes a second attach;
    together they hold every recorded message, byte for byte, once."""
    served = serve_process("--no-http", "--data-dir", str(tmp_path / "data"))
    target = ["--target", served.grpc_address]
    sid = omni("run", "list my files", "--approve", "ask", "--detach", *target).stdout.strip()
    # The first reader replays from the session's start (its epoch's id 0)
    # up to the pending approval, then lets go (Ctrl-C).
    [listed] = [
        json.loads(line) for line in omni("sessions", "--json", *target).stdout.splitlines()
    ]
    newest = parse_event_id(listed["last_event_id"])
    assert newest is not None
    first = subprocess.Popen(
        [*OMNI, "attach", sid, "--after", f"{newest[0]}-0", "--ids", *target],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert first.stderr is not None
    for line in first.stderr:
        if line.startswith("approval pending: "):
            break
    first.send_signal(signal.SIGINT)
    before, _ = first.communicate(timeout=60)
    assert first.returncode == 130
    lines = [json.loads(line) for line in before.splitlines()]
    assert lines and all(set(line) == {"id", "message"} for line in lines)
    last = lines[-1]["id"]
    # The second resumes after the last id the first printed; the approval
    # is answered once it is attached, and it follows the task to its end.
    second = subprocess.Popen(
        [*OMNI, "attach", sid, "--after", last, "--ids", *target],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert second.stderr is not None
    for line in second.stderr:
        if line.startswith("approval pending: "):
            break
    assert omni("approve", sid, "call_demo_1", "allow", *target).returncode == 0
    after, err = second.communicate(timeout=60)
    assert second.returncode == 0, err
    lines += [json.loads(line) for line in after.splitlines()]
    ids = [parse_event_id(line["id"]) for line in lines]
    assert all(i is not None for i in ids)
    assert ids == sorted(set(ids)), "ids repeat or run backwards"  # type: ignore[type-var]
    # The complete messages, in order, are the trace's records, and each is
    # carried in the trace's exact bytes.
    complete = [
        line["message"]
        for line in lines
        if not line["message"]["payload"]["type"].startswith("partial_")
    ]
    # (The replay starts after id 0, the session_meta the trace opens with.)
    meta, *recorded = omni("history", sid, "--json", *target).stdout.splitlines()
    assert json.loads(meta)["type"] == "session_meta"
    assert complete == [json.loads(r) for r in recorded]
    for record in recorded:
        assert f',"message":{record}}}\n' in before + after


def test_run_without_a_prompt_on_a_terminal_says_how_to_give_one() -> None:
    """No PROMPT with stdin a terminal: nothing to read, a usage error (2)."""
    import pty

    master, slave = pty.openpty()
    try:
        done = subprocess.run([*OMNI, "run", "--target", f"127.0.0.1:{closed_port()}"],
                              stdin=slave, capture_output=True, text=True, timeout=60)  # fmt: skip
    finally:
        os.close(slave)
        os.close(master)
    assert done.returncode == 2
    assert done.stderr == "omni-grpc run: give the PROMPT, or pipe it in: echo hi | omni-grpc run\n"
