"""What each client verb imports: none of the server.

``abort`` should stop a run at once, and importing the server (the A2A SDK,
Starlette, the runtime...) cost every client verb seconds. Each verb runs
here as a real process against a real ``omni-grpc serve``, doing its real
job (a run rendered, an approval answered from another process while
``attach`` waits on it...), and reports at exit the modules it had loaded.
This is the import graph as it is, lazy imports included; the time it costs
is measured in benchmarks/cli_startup.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import ServeProcess

ServeFactory = Callable[..., ServeProcess]

# The server's side of the package and what only the server needs.
SERVER_MODULES = (
    "omni_grpc.runtime",
    "omni_grpc.transport",
    "omni_grpc.server",
    "omni_grpc.engines",
    "omni_grpc.observability",
    "omni_grpc.trace",
    "a2a",
    "starlette",
    "uvicorn",
    "redis",
    "httpx",
    "opentelemetry",
)
# What a verb that prints no message needs neither: the terminal renderer and
# the codec (abort, approve, sessions, history --json).
RENDERING = ("rich", "omni_grpc.convert", "omni_grpc.cli.render")

# Runs the CLI, then writes the names of the loaded modules to argv[1].
PROBE = """
import atexit, json, sys
out = sys.argv.pop(1)
atexit.register(lambda: open(out, "w").write(json.dumps(sorted(sys.modules))))
from omni_grpc.cli import main
sys.exit(main(sys.argv[1:]))
"""


def loaded_by(tmp_path: Path, *args: str, stdin: str = "") -> tuple[set[str], str]:
    """The modules ``omni-grpc ARGS`` had loaded at its exit, and its stderr."""
    out = tmp_path / f"modules-{len(list(tmp_path.glob('modules-*')))}.json"
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(out), *args],
        input=stdin, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.exists(), done.stderr
    return set(json.loads(out.read_text())), done.stderr


def among(modules: set[str], prefixes: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == p or m.startswith(p + ".") for p in prefixes))


@pytest.fixture
def served(serve_process: ServeFactory) -> ServeProcess:
    return serve_process("--no-http")


def test_no_client_verb_loads_the_server(served: ServeProcess, tmp_path: Path) -> None:
    target = ["--target", served.grpc_address]
    seen: dict[str, set[str]] = {}

    def verb(name: str, *args: str, stdin: str = "") -> str:
        seen[name], stderr = loaded_by(tmp_path, *args, *target, stdin=stdin)
        return stderr

    verb("run", "run", "hello there", "--approve", "allow")
    verb("run --ids", "run", "hello", "--approve", "allow", "--ids")
    verb("chat", "chat", "--approve", "allow", stdin="hi\n")
    verb("sessions", "sessions")
    # A task left waiting on an approval: attach follows it while approve,
    # from another process, answers it.
    detached = subprocess.run(
        [sys.executable, "-m", "omni_grpc", "run", "list my files", "--approve", "ask",
         "--detach", *target],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    sid = detached.stdout.strip()
    out = tmp_path / "attach.json"
    attach = subprocess.Popen(
        [sys.executable, "-c", PROBE, str(out), "attach", sid, *target],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert attach.stderr is not None
    for line in attach.stderr:
        if line.startswith("approval pending: "):
            break
    else:
        raise AssertionError(f"attach never offered the approval ({attach.wait()})")
    verb("approve", "approve", sid, "call_demo_1", "allow")
    attach.communicate(timeout=60)
    assert attach.returncode == 0
    seen["attach"] = set(json.loads(out.read_text()))
    verb("history", "history", sid)
    verb("history --json", "history", sid, "--json")
    verb("abort", "abort", sid)  # idle by now: exit 1, after asking the server
    verb("sessions rm", "sessions", "rm", sid)

    for name, modules in seen.items():
        assert among(modules, SERVER_MODULES) == [], name
        assert "omni_grpc.client" in modules, name  # it did talk to the server
    for name in ("abort", "approve", "sessions", "sessions rm", "history --json"):
        assert among(seen[name], RENDERING) == [], name
    for name in ("run", "chat", "attach", "history"):
        assert "omni_grpc.cli.render" in seen[name], name


def test_version_loads_no_command(tmp_path: Path) -> None:
    modules, _ = loaded_by(tmp_path, "--version")
    assert among(modules, ("omni_grpc.cli", "grpc", "rich", "omni_grpc.client")) == [
        "omni_grpc.cli"
    ]


def test_a_refused_verb_still_loads_no_server(tmp_path: Path) -> None:
    """The error path too (the hint for a server that is not there)."""
    modules, stderr = loaded_by(tmp_path, "abort", "SID", "--target", "127.0.0.1:1")
    assert "is `omni-grpc serve` running?" in stderr
    assert among(modules, SERVER_MODULES + RENDERING) == []


def test_the_check_can_fail(tmp_path: Path) -> None:
    """``serve --help`` loads the server: the probe sees it."""
    modules, _ = loaded_by(tmp_path, "serve", "--help")
    found = among(modules, SERVER_MODULES)
    assert "omni_grpc.server" in found and "a2a" in {m.split(".")[0] for m in found}


def test_the_client_still_sends_the_trace_context_of_a_process_that_traces() -> None:
    """Skipping OpenTelemetry is only for a process that never loaded it: one
    that did, with a span current, still sends it as traceparent."""
    from opentelemetry.sdk.trace import TracerProvider

    from omni_grpc.client.agent_client import outgoing_metadata

    tracer = TracerProvider().get_tracer("test")
    with tracer.start_as_current_span("caller") as span:
        sent = dict(outgoing_metadata((("x-a", "1"),)))
    context = span.get_span_context()
    assert sent["x-a"] == "1"
    flags = int(context.trace_flags)
    assert sent["traceparent"] == f"00-{context.trace_id:032x}-{context.span_id:016x}-{flags:02x}"
    # With no span current there is nothing to add.
    assert outgoing_metadata((("x-a", "1"),)) == (("x-a", "1"),)
