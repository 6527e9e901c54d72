"""The Go, Java and Node example clients against a real AgentService.

The server is the scripted Go one, whose turn is known message by message,
so each assertion is exact: the streamed text, the approval round trip, the
abort, and a re-attach that loses and repeats nothing.
"""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

PROMPT = "hello polyglot"
FULL_TEXT = "You said: hello polyglot\nThat was 2 words.\n"


def run_client(client: list[str], *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([*client, *args], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, f"{client[0]} {args} failed:\n{done.stderr}"
    return done


def test_streams_the_text(client: list[str], go_server: str) -> None:
    done = run_client(client, "run", "--addr", go_server, PROMPT)
    assert done.stdout == FULL_TEXT
    # ALLOW_ALL: the server decides, the client only sees the outcome.
    assert "[approve]" not in done.stderr
    assert "[tool_output] 2 words" in done.stderr


def test_answers_approval_requests(client: list[str], go_server: str) -> None:
    done = run_client(client, "run", "--addr", go_server, "--approve", PROMPT)
    assert done.stdout == FULL_TEXT
    assert done.stderr.count("[approve] word_count call_1") == 1
    assert "[tool_output] 2 words" in done.stderr


def test_aborts(client: list[str], go_server: str) -> None:
    # ASK mode without approving: the task waits at the tool call, so the
    # abort lands there every time.
    done = run_client(client, "run", "--addr", go_server, "--abort-after", "3", PROMPT)
    assert done.stdout == "You said: hello polyglot\n"
    assert "[abort] requested, was running: true" in done.stderr
    assert done.stderr.rstrip().endswith("[aborted] stopped by omni-client")
    assert "[tool_output]" not in done.stderr


def test_reattaches_after_a_dropped_call(client: list[str], go_server: str) -> None:
    # Dropped mid-sentence: the rest must arrive through Attach, once.
    done = run_client(client, "run", "--addr", go_server, "--approve", "--drop-after", "4", PROMPT)
    assert "[reconnect] attach after " in done.stderr
    assert done.stdout == FULL_TEXT
    assert done.stderr.count("[approve] word_count call_1") == 1


def test_reads_a_binpb_trace_from_omni_grpc_convert(client: list[str], tmp_path: Path) -> None:
    from polyglot.trace_expectations import (
        convert_with_cli,
        expected_trace_lines,
        parse_trace_lines,
    )

    source = Path(__file__).parents[1] / "conformance" / "stream_basic_tool_turn.jsonl"
    binpb = convert_with_cli(source, tmp_path)
    done = run_client(client, "trace", str(binpb))
    assert parse_trace_lines(done.stdout) == expected_trace_lines(source)


def test_a_reader_that_stops_early_ends_the_client_quietly(
    client: list[str], tmp_path: Path
) -> None:
    """``client trace BIG.binpb | head -1``: the closed pipe is not an error to report."""
    from polyglot.trace_expectations import convert_with_cli

    source = Path(__file__).parents[1] / "conformance" / "stream_basic_tool_turn.jsonl"
    one = convert_with_cli(source, tmp_path).read_bytes()
    big = tmp_path / "big.binpb"
    # Delimited traces concatenate; far more output than a pipe buffer holds.
    big.write_bytes(one * 2000)
    proc = subprocess.Popen(
        [*client, "trace", str(big)], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline().startswith(b"#1 ")
    proc.stdout.close()
    stderr = proc.stderr.read().decode()
    returncode = proc.wait(timeout=60)
    # 0, or killed by SIGPIPE like cat(1); never a stack trace or an error line.
    assert returncode in (0, -signal.SIGPIPE), (returncode, stderr)
    assert stderr == ""
