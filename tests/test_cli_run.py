"""``omni-grpc serve`` and ``omni-grpc run`` as real processes."""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import ServeProcess
from small_disk import SmallDisk

from omni_grpc.cli.target import with_default_port
from omni_grpc.convert import parse_message, serialize_message
from omni_grpc.trace import TraceRecord, read_jsonl
from omni_grpc.trace.validate import validate_records

ServeFactory = Callable[..., ServeProcess]


def omni(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "omni_grpc", *args], capture_output=True, text=True, timeout=timeout
    )


def errors(records: list[TraceRecord], *, trace: bool) -> list[str]:
    return [
        f"{i.line}: {i.message}"
        for i in validate_records(records, trace=trace)
        if i.severity == "error"
    ]


def test_run_json_prints_a_valid_stream(serve_process: ServeFactory) -> None:
    served = serve_process()
    done = omni("run", "hello from the cli", "--target", served.grpc_address, "--json")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    records = [TraceRecord(n + 1, parse_message(line)) for n, line in enumerate(lines)]
    assert errors(records, trace=False) == []
    first = json.loads(lines[0])
    assert first["payload"] == {
        "type": "text",
        "role": "user",
        "text": "hello from the cli",
        "stop_reason": "completed",
    }
    # Each line is in the reference's exact form: the codec writes it back byte for byte.
    assert [serialize_message(r.message).decode() for r in records] == lines
    assert "session session-" in done.stderr


def test_run_renders_for_humans_and_continues_a_session(serve_process: ServeFactory) -> None:
    served = serve_process()
    first = omni("run", "first turn", "--target", served.grpc_address, "--approve", "deny")
    assert first.returncode == 0, first.stderr
    assert "tool call list_workspace [call_demo_1]" in first.stdout
    assert "approval: deny [call_demo_1]" in first.stdout
    assert "Tool call denied by user." in first.stdout
    session_id = first.stderr.split("session ", 1)[1].split()[0]
    second = omni(
        "run", "second turn", "--target", served.grpc_address, "--session", session_id, "--json"
    )
    assert second.returncode == 0, second.stderr
    assert '"call_demo_2"' in second.stdout  # the engine saw the same session again


def test_run_approve_takes_the_serve_and_sse_mode_words(serve_process: ServeFactory) -> None:
    served = serve_process("--no-http")
    for mode, decision in [("allow-all", "allow"), ("deny-all", "deny"), ("read-only", "allow")]:
        done = omni("run", "x", "--target", served.grpc_address, "--approve", mode)
        assert done.returncode == 0, done.stderr
        assert f"approval: {decision} [call_demo_1]" in done.stdout, (mode, done.stdout)
    shown = " ".join(omni("run", "--help").stdout.split())
    assert "--approve {allow-all,deny-all,read-only,ask}" in shown


def test_run_reports_call_failures_with_exit_3(serve_process: ServeFactory) -> None:
    served = serve_process("--auth-token", "tok")
    refused = omni("run", "x", "--target", served.grpc_address)
    assert refused.returncode == 3
    assert "UNAUTHENTICATED" in refused.stderr
    allowed = omni("run", "x", "--target", served.grpc_address, "--token", "tok", "--json")
    assert allowed.returncode == 0, allowed.stderr
    unknown = omni("run", "x", "--target", served.grpc_address, "--token", "tok",
                   "--session", "session-missing")  # fmt: skip
    assert unknown.returncode == 3 and "NOT_FOUND" in unknown.stderr


def test_run_states_a_refused_request_once(serve_process: ServeFactory) -> None:
    served = serve_process("--no-http")
    empty = omni("run", "", "--target", served.grpc_address)
    assert empty.returncode == 3
    # The status message already names the field; its BadRequest detail adds nothing.
    assert (
        empty.stderr == "omni-grpc run: INVALID_ARGUMENT: input: set input messages or a prompt\n"
    )


def test_run_errors_are_single_lines() -> None:
    with socket.socket() as closed:  # bound, not listening: connections are refused
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
        refused = omni("run", "x", "--target", f"127.0.0.1:{port}")
    assert refused.returncode == 3
    # gRPC's message runs past 80 columns; it must not be soft-wrapped
    # mid-sentence. The line after it says what to do (test_cli_guidance.py).
    line, hint = refused.stderr.splitlines()
    assert line.startswith("omni-grpc run: UNAVAILABLE: ") and len(line) > 80
    assert f"127.0.0.1:{port}" in line and line.endswith("refused")
    assert hint.startswith(f"omni-grpc run: nothing answered at 127.0.0.1:{port}: ")


@pytest.mark.parametrize("mode", [["--json"], []])
def test_a_closed_stdout_aborts_the_run_quietly(
    serve_process: ServeFactory, tmp_path: Path, mode: list[str]
) -> None:
    data = tmp_path / "data"
    served = serve_process("--data-dir", str(data), "--pacing", "0.05", "--no-http")
    read_end, write_end = os.pipe()
    os.close(read_end)  # as `| head` does once it has its lines
    try:
        done = subprocess.run(
            [sys.executable, "-m", "omni_grpc", "run", "x", "--target", served.grpc_address, *mode],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    finally:
        os.close(write_end)
    # 128 + SIGPIPE, as a shell reports for a tool the signal ended; nothing on stderr.
    assert (done.returncode, done.stderr) == (141, "")
    # Nobody reads the output, so the run was aborted rather than left running.
    deadline = time.monotonic() + 20
    while True:
        traces = list(data.glob("traces/*/*.jsonl"))
        records = list(read_jsonl(traces[0])) if traces else []
        if records and records[-1].message.WhichOneof("payload") == "abort":
            break
        assert time.monotonic() < deadline, "the run was not aborted"
        time.sleep(0.1)
    assert errors(records, trace=True) == []
    assert records[-1].message.abort.reason == "the Run call was cancelled"


def test_ctrl_c_aborts_the_run_and_exits_130(serve_process: ServeFactory, tmp_path: Path) -> None:
    data = tmp_path / "data"
    served = serve_process("--data-dir", str(data), "--pacing", "0.2", "--no-http")
    runner = subprocess.Popen(
        [sys.executable, "-m", "omni_grpc", "run", "x", "--target", served.grpc_address, "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert runner.stdout is not None
    assert runner.stdout.readline()  # under way
    runner.send_signal(signal.SIGINT)
    _, stderr = runner.communicate(timeout=30)
    assert runner.returncode == 130
    assert stderr == "interrupted: the run was aborted\n"
    deadline = time.monotonic() + 20
    while True:
        [trace] = list(data.glob("traces/*/*.jsonl"))
        records = list(read_jsonl(trace))
        if records[-1].message.WhichOneof("payload") == "abort":
            break
        assert time.monotonic() < deadline, "the run was not aborted"
        time.sleep(0.1)


def test_run_help_lists_the_exit_statuses() -> None:
    shown = omni("run", "--help").stdout
    statuses = shown.split("exit status:\n", 1)[1].splitlines()
    assert [line.split()[0] for line in statuses] == ["0", "1", "2", "3", "130", "141"]


def test_run_usage_errors_exit_2() -> None:
    # --approve ask needs a terminal; stdin here is not one.
    asked = subprocess.run(
        [sys.executable, "-m", "omni_grpc", "run", "x", "--approve", "ask"],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=60,
    )
    assert asked.returncode == 2 and "needs a terminal" in asked.stderr


def test_run_target_without_a_port_dials_50051() -> None:
    with socket.socket() as probe:
        if probe.connect_ex(("127.0.0.1", 50051)) == 0:
            pytest.skip("something listens on 127.0.0.1:50051 here")
    # Nothing listens, so the failure names the address gRPC dialled (it was :443).
    v4 = omni("run", "x", "--target", "127.0.0.1")
    assert v4.returncode == 3 and "ipv4:127.0.0.1:50051" in v4.stderr, v4.stderr
    v6 = omni("run", "x", "--target", "[::1]")
    assert v6.returncode == 3 and ":50051" in v6.stderr and ":443" not in v6.stderr, v6.stderr
    shown = omni("run", "--help")
    assert "the port defaults to 50051 (default $OMNI_TARGET, else 127.0.0.1:50051)" in " ".join(
        shown.stdout.split()
    )


@pytest.mark.parametrize(
    ("target", "dialled"),
    [
        ("localhost", "localhost:50051"),
        ("10.0.0.7:9000", "10.0.0.7:9000"),
        ("[::1]", "[::1]:50051"),
        ("::1", "[::1]:50051"),
        ("[::1]:9000", "[::1]:9000"),
        ("dns:///agents.internal:9000", "dns:///agents.internal:9000"),
        ("unix:/run/omni.sock", "unix:/run/omni.sock"),
        ("ipv6:[::1]:9000", "ipv6:[::1]:9000"),
    ],
)
def test_target_forms(target: str, dialled: str) -> None:
    assert with_default_port(target) == dialled


def test_serve_rejects_a_bad_engine_and_a_taken_port(tmp_path: Path) -> None:
    bad = omni("serve", "--engine", "nope", "--data-dir", str(tmp_path), "--no-http")
    assert bad.returncode == 2 and "unknown engine 'nope'" in bad.stderr
    opts = omni("serve", "--engine-opt", "bogus=1", "--data-dir", str(tmp_path), "--no-http")
    assert opts.returncode == 2 and "unknown option(s) bogus" in opts.stderr
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        grpc_clash = omni("serve", "--grpc-port", port, "--data-dir", str(tmp_path), "--no-http")
        http_clash = omni(
            "serve", "--grpc-port", "0", "--http-port", port, "--data-dir", str(tmp_path)
        )
    # Each names the transport, the address, why, and the flag that moves it.
    assert grpc_clash.returncode == 1
    # Our line alone: grpcio's own "E... Failed to add port" log line is not printed.
    assert grpc_clash.stderr == (
        f"omni-grpc serve: cannot bind gRPC to 127.0.0.1:{port}: the port is already in use; "
        "choose another port with --grpc-port (0 picks a free one)\n"
    )
    assert http_clash.returncode == 1
    assert http_clash.stderr.endswith(
        f"omni-grpc serve: cannot bind HTTP/SSE to 127.0.0.1:{port}: the port is already in use; "
        "choose another port with --http-port (0 picks a free one)\n"
    )


def test_serve_shows_and_records_its_data_directory_absolute(
    serve_process: ServeFactory, tmp_path: Path
) -> None:
    data = tmp_path / "rel-data"
    served = serve_process("--data-dir", os.path.relpath(data), "--no-http")
    # The banner says where traces go, as an absolute path, before "ready".
    assert served.banner[-2] == f"omni-grpc data in {data} (traces/, workspaces/)\n"
    assert served.banner[-1] == "omni-grpc ready\n"
    done = omni("run", "x", "--target", served.grpc_address, "--json")
    assert done.returncode == 0, done.stderr
    [trace] = list(data.glob("traces/*/*.jsonl"))
    meta = json.loads(trace.read_text().splitlines()[0])
    session_id = meta["payload"]["session_id"]
    assert meta["payload"]["workspace"] == str(data / "workspaces" / session_id)
    shown = " ".join(omni("serve", "--help").stdout.split())
    assert "(default .omni-grpc, in the current directory)" in shown


def test_sigterm_records_the_abort_of_a_running_task(
    serve_process: ServeFactory, tmp_path: Path
) -> None:
    # SIGTERM drains first (tests/test_drain.py); a task slower than the drain
    # period is then aborted, and that abort is what this test follows.
    data = tmp_path / "data"
    # Resumption off: the drain would hand the task over instead.
    served = serve_process(
        "--data-dir", str(data), "--pacing", "0.2", "--drain-timeout", "0.5", "--resume-runs", "0"
    )
    runner = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "omni_grpc",
            "run",
            "slow",
            "--target",
            served.grpc_address,
            "--json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert runner.stdout is not None
    seen = [runner.stdout.readline() for _ in range(4)]  # the task is under way
    assert all(seen)
    served.process.send_signal(signal.SIGTERM)
    rest, _ = runner.communicate(timeout=30)
    assert served.process.wait(30) == 0
    # The client saw the abort, and exits 1 for an aborted run.
    streamed = [json.loads(line) for line in seen + rest.splitlines()]
    assert streamed[-1]["payload"] == {"type": "abort", "reason": "server shutting down"}
    assert runner.returncode == 1
    [trace] = list(data.glob("traces/*/*.jsonl"))
    records = list(read_jsonl(trace))
    assert errors(records, trace=True) == []
    assert records[-1].message.abort.reason == "server shutting down"


def test_ask_prompts_on_a_terminal(serve_process: ServeFactory) -> None:
    served = serve_process()
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "omni_grpc", "run", "may I?", "--target", served.grpc_address,
         "--approve", "ask"],
        stdin=slave, stdout=slave, stderr=slave, env={**os.environ, "COLUMNS": "100"},
    )  # fmt: skip
    os.close(slave)
    output = b""
    answered = False
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(master, 4096)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            output += chunk
        if not answered and b"Allow this tool call?" in output:
            os.write(master, b"n\n")
            answered = True
        if proc.poll() is not None and not ready:
            break
    os.close(master)
    assert proc.wait(10) == 0
    text = output.decode(errors="replace")
    assert answered, text
    assert "approve list_workspace [call_demo_1]?" in text
    assert "approval: deny [call_demo_1]" in text and "Tool call denied by user." in text


def test_serve_points_the_openai_engine_with_base_url_and_model(
    serve_process: ServeFactory,
) -> None:
    from fakes.openai_server import FakeOpenAI, text_reply

    with FakeOpenAI() as upstream:
        upstream.script(text_reply("Hello from the model."))
        served = serve_process(
            "--engine",
            "openai",
            "--base-url",
            upstream.base_url,
            "--model",
            "tiny-model",
            env={"OPENAI_API_KEY": "sk-test"},
        )
        done = omni("run", "hi", "--target", served.grpc_address, "--json")
        assert done.returncode == 0, done.stderr
        texts = [
            json.loads(line)["payload"].get("text")
            for line in done.stdout.splitlines()
            if '"type":"text"' in line
        ]
        assert texts[-1] == "Hello from the model."
        (request,) = upstream.requests
        assert request.body["model"] == "tiny-model"


def test_a_second_server_cannot_share_a_running_servers_port(
    serve_process: ServeFactory, tmp_path: Path
) -> None:
    """grpcio would share the port (SO_REUSEPORT) and split sessions between
    two processes; the second server must refuse instead."""
    first = serve_process("--no-http")
    port = first.grpc_address.rsplit(":", 1)[1]
    second = omni(
        "serve", "--grpc-port", port, "--no-http", "--data-dir", str(tmp_path / "second"),
        timeout=30,
    )  # fmt: skip
    assert second.returncode == 1
    assert f"cannot bind gRPC to 127.0.0.1:{port}: the port is already in use" in second.stderr
    assert first.process.poll() is None  # the first server is untouched


@pytest.mark.parametrize("as_json", [False, True], ids=["rendered", "json"])
def test_a_run_the_server_stopped_exits_1_and_says_why(
    serve_process: ServeFactory, small_disk: SmallDisk, as_json: bool
) -> None:
    """The disk fills during the run: the server closes the task with
    task_state idle, then ends the call with RESOURCE_EXHAUSTED. Stopping at
    the idle event would report that as success."""
    served = serve_process(
        "--data-dir", str(small_disk.path / "data"), "--engine-opt", "repeat=200"
    )
    small_disk.leave(pages=2)  # the run's first records fit, its answer does not
    done = omni("run", "fill it", "--target", served.grpc_address, *(["--json"] * as_json))
    assert done.returncode == 1, done.stderr
    assert "omni-grpc run: the run failed: RESOURCE_EXHAUSTED" in done.stderr
    assert "trace could not be written" in done.stderr
    assert "session session-" in done.stderr
