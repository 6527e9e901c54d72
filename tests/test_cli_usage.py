"""The command line's manners, as real processes: help when called bare, the
version, plain words in choice errors, a prompt from stdin, a directory named
where a file belongs, and attach --after ids that cannot be right."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ServeProcess

from omni_grpc import __version__
from omni_grpc.client import AgentClient


def omni(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "omni_grpc", *args],
        capture_output=True,
        text=True,
        timeout=60,
        input=stdin,
        stdin=None if stdin is not None else subprocess.DEVNULL,
    )


def test_bare_command_prints_the_help() -> None:
    done = omni()
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: omni-grpc")
    for command in ("serve", "run", "attach", "sessions", "validate"):
        assert command in done.stdout


def test_version() -> None:
    done = omni("--version")
    assert (done.returncode, done.stdout) == (0, f"omni-grpc {__version__}\n")


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("run", "x", "--approve", "bogus"), "'allow-all', 'deny-all', 'read-only', 'ask'"),
        (("run", "x", "--thinking", "bogus"), "'none', 'low', 'medium'"),
        (("approve", "s", "c", "bogus"), "'allow', 'deny'"),
    ],
)
def test_a_wrong_choice_lists_the_words_to_use(args: tuple[str, ...], words: str) -> None:
    done = omni(*args)
    assert done.returncode == 2
    assert words in done.stderr
    assert "<" not in done.stderr, "an enum repr leaked into the message"


def test_validate_names_a_directory_as_one(tmp_path: str) -> None:
    for args in ((str(tmp_path),), ("--from", "jsonl", str(tmp_path))):
        done = omni("validate", *args)
        assert done.returncode == 2
        assert f"{tmp_path} is a directory" in done.stderr


async def _history_texts(target: str, session_id: str) -> list[str]:
    async with AgentClient(target) as agent:
        return [m.text.text async for m in agent.history(session_id) if m.HasField("text")]


def test_run_dash_reads_the_prompt_from_stdin(serve_process: ServeProcess) -> None:
    served = serve_process("--no-http")
    prompt = "a prompt\nof two lines"
    done = omni("run", "-", "--target", served.grpc_address, "--json", stdin=prompt + "\n")
    assert done.returncode == 0, done.stderr
    first = json.loads(done.stdout.splitlines()[0])
    assert first["payload"]["text"] == prompt
    empty = omni("run", "-", "--target", served.grpc_address, stdin="\n")
    assert empty.returncode == 2 and "empty" in empty.stderr


def test_attach_after_a_malformed_id_is_a_usage_error() -> None:
    # No server at all: the id is refused before anything is dialled.
    done = omni("attach", "s1", "--after", "not-an-id", "--target", "127.0.0.1:9")
    assert done.returncode == 2
    assert "--after 'not-an-id' is not an event id" in done.stderr


def test_attach_after_a_future_id_says_so(serve_process: ServeProcess) -> None:
    served = serve_process("--no-http")
    target = ["--target", served.grpc_address]
    run = omni("run", "hello", *target, "--json")
    assert run.returncode == 0, run.stderr
    [row] = [json.loads(line) for line in omni("sessions", *target, "--json").stdout.splitlines()]
    epoch, seq = row["last_event_id"].rsplit("-", 1)
    future = f"{epoch}-{int(seq) + 100}"
    done = omni("attach", row["session_id"], "--after", future, *target)
    assert done.returncode == 2, done.stderr
    assert f"--after {future} is later than the session's newest event" in done.stderr
    assert "no longer buffered" not in done.stderr


def test_a_replay_hints_only_at_approvals_still_pending(serve_process: ServeProcess) -> None:
    """The replay after --after holds approval requests answered since (their
    decision follows in the replay): hinting at them invites a second answer."""
    served = serve_process("--no-http")
    target = ["--target", served.grpc_address]
    session_id = omni("run", "first", *target, "--approve", "ask", "--detach").stdout.strip()
    first_id = asyncio.run(_first_event_id(served.grpc_address, session_id))
    approved = omni("approve", session_id, "call_demo_1", "allow", *target)
    assert approved.returncode == 0, approved.stderr
    asyncio.run(_wait_idle(served.grpc_address, session_id))
    replay = omni("attach", session_id, "--after", first_id, *target)
    assert replay.returncode == 0, replay.stderr
    assert "approval: allow [call_demo_1]" in replay.stdout
    assert "approval pending" not in replay.stderr

    # A second task waits on its approval: the replay through it still hints, once.
    omni("run", "second", *target, "--approve", "ask", "--detach", "--session", session_id)
    asyncio.run(_wait_pending(served.grpc_address, session_id))
    attach = subprocess.Popen(
        [sys.executable, "-m", "omni_grpc", "attach", session_id, "--after", first_id, *target],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    assert attach.stderr is not None
    notice = attach.stderr.readline()
    assert notice.startswith("approval pending: omni-grpc approve"), notice
    pending = notice.split()[5]
    assert omni("approve", session_id, pending, "deny", *target).returncode == 0
    _, rest = attach.communicate(timeout=60)
    assert attach.returncode == 0, rest
    assert "approval pending" not in rest, (notice, rest)


async def _first_event_id(target: str, session_id: str) -> str:
    async with AgentClient(target) as agent:
        async for event in agent.attach(session_id, None):
            if event.event_id:
                return event.event_id
    raise AssertionError("no event")


async def _wait_idle(target: str, session_id: str) -> None:
    async with AgentClient(target) as agent:
        async for event in agent.attach(session_id, None):
            if event.is_task_end:
                return


async def _wait_pending(target: str, session_id: str) -> None:
    async with AgentClient(target) as agent:
        async for event in agent.attach(session_id, None):
            if event.kind == "@approval_request":
                return


def _banner_url(served: ServeProcess) -> str:
    [url] = [w for line in served.banner for w in line.split() if w.startswith("grpc")]
    return url


def test_omni_target_and_the_url_serve_prints_reach_the_server(
    serve_process: ServeProcess,
) -> None:
    served = serve_process("--no-http")
    url = _banner_url(served)
    assert url.startswith("grpc://")
    by_url = omni("sessions", "--target", url)
    assert by_url.returncode == 0, by_url.stderr
    by_env = subprocess.run(
        [sys.executable, "-m", "omni_grpc", "sessions", "--json"],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
        env={**os.environ, "OMNI_TARGET": url},
    )  # fmt: skip
    assert by_env.returncode == 0, by_env.stderr
    # A flag still wins over the variable.
    flag_wins = subprocess.run(
        [sys.executable, "-m", "omni_grpc", "sessions", "--target", served.grpc_address],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
        env={**os.environ, "OMNI_TARGET": "127.0.0.1:9"},
    )  # fmt: skip
    assert flag_wins.returncode == 0, flag_wins.stderr
    bad = omni("sessions", "--target", url + "/v1/runs")
    assert bad.returncode == 2 and "a gRPC address has no path" in bad.stderr


def test_a_grpcs_url_dials_with_tls(serve_process: ServeProcess, certs: Path) -> None:
    served = serve_process("--no-http", "--tls-cert", str(certs / "server.pem"),
                           "--tls-key", str(certs / "server.key"))  # fmt: skip
    url = _banner_url(served)
    assert url.startswith("grpcs://")
    done = omni("sessions", "--target", url, "--tls-ca", str(certs / "ca.pem"))
    assert done.returncode == 0, done.stderr
    # The same address as grpc:// is plaintext, which a TLS server refuses.
    plain = omni("sessions", "--target", url.replace("grpcs://", "grpc://"))
    assert plain.returncode == 3, plain.stderr


def test_an_engine_retry_is_shown_with_its_wait_and_next_attempt() -> None:
    """The openai engine's request_end before a retry carries retry_in_ms and
    the failed attempt; the live view says when the next one comes."""
    import io

    from rich.console import Console

    from omni_grpc import protocol
    from omni_grpc.cli.render import Renderer
    from omni_grpc.convert import message_from_dict, message_to_dict

    out = io.StringIO()
    renderer = Renderer(Console(file=out, width=200, color_system=None))
    for built in (
        protocol.request_end(
            "timeout", error_message="no answer in 30 s", attempt=1, retry_in_ms=2000
        ),
        protocol.request_end("failed", error_message="HTTP 500", attempt=5),
    ):
        renderer.show_message(message_to_dict(message_from_dict(built)))
    assert out.getvalue().splitlines() == [
        "request failed: no answer in 30 s; retrying in 2 s, attempt 2",
        "request failed: HTTP 500",
    ]


def test_a_retry_says_which_attempt_of_how_many(serve_process: ServeProcess) -> None:
    """Issue 22: "retrying in 2 s, attempt 2/5" in the CLI. The server tells
    the engine's attempts in the Run call's initial metadata; the request it
    retries is a real HTTP 503 from a fake OpenAI-compatible server."""
    from fakes.openai_server import FakeOpenAI, error_reply, text_reply

    with FakeOpenAI() as fake:
        fake.script(error_reply(503, "busy"), text_reply("ok after all"))
        served = serve_process(
            "--no-http", "--engine", "openai",
            "--engine-opt", f"base_url={fake.base_url}",
            "--engine-opt", "model=m",
            "--engine-opt", "retry_base_ms=1",
            "--engine-opt", "max_attempts=3",
        )  # fmt: skip
        done = omni("run", "hello", "--target", served.grpc_address)
        assert done.returncode == 0, done.stderr
        shown = done.stdout + done.stderr
        assert "attempt 2/3" in shown, shown
        assert "ok after all" in shown
        # attach replaying that run says it alike (Attach's metadata)
        [session] = [line.split()[-1] for line in done.stderr.splitlines() if "session" in line]
        again = omni("attach", session, "--after", f"{epoch_of(served, session)}-0",
                     "--target", served.grpc_address)  # fmt: skip
        assert again.returncode == 0, again.stderr
        assert "attempt 2/3" in again.stdout + again.stderr, again.stdout + again.stderr


def epoch_of(served: ServeProcess, session_id: str) -> str:
    async def last() -> str:
        async with AgentClient(served.grpc_address) as client:
            [info] = [s for s in await client.list_sessions() if s.session_id == session_id]
            return str(info.last_event_id).rsplit("-", 1)[0]

    return asyncio.run(last())
