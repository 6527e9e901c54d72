"""The Go, Java and Node example clients against the real Python server
(in-process, demo engine, loopback port chosen by the OS).

What the client printed is checked against the session's recorded history,
read back with the Python client library: the assistant's text, each
message once, whatever happened to the connection.
"""

from __future__ import annotations

import asyncio
import re

from conftest import ServerFactory
from small_disk import SmallDisk

from omni_grpc.client import AgentClient
from omni_grpc_proto.omni.v1 import omni_pb2

PROMPT = "list the workspace"


async def run_client(client: list[str], *args: str) -> tuple[str, str]:
    # Async: the server runs in this event loop, so a blocking call would stall it.
    proc = await asyncio.create_subprocess_exec(
        *client,
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode == 0, f"{client[0]} {args} failed:\n{err.decode()}"
    return out.decode(), err.decode()


async def recorded_text(target: str, stderr: str) -> tuple[str, list[omni_pb2.OmniMessage]]:
    """The session's assistant text, one line per complete text message."""
    match = re.search(r"^\[session\] (\S+)$", stderr, re.MULTILINE)
    assert match, stderr
    async with AgentClient(target) as agent:
        history = [m async for m in agent.history(match.group(1))]
    texts = [
        m.text.text
        for m in history
        if m.WhichOneof("payload") == "text" and m.text.role == omni_pb2.ROLE_ASSISTANT
    ]
    return "".join(t + "\n" for t in texts), history


async def test_streams_and_approves(client: list[str], grpc_target: str) -> None:
    out, err = await run_client(client, "run", "--addr", grpc_target, "--approve", PROMPT)
    text, history = await recorded_text(grpc_target, err)
    assert text and out == text
    assert re.search(r"^\[approve\] list_workspace \S+$", err, re.MULTILINE)
    decisions = [m for m in history if m.WhichOneof("payload") == "approval_decision"]
    assert [d.approval_decision.decision for d in decisions] == [omni_pb2.DECISION_ALLOW]


async def test_reattaches_without_loss_or_repeats(client: list[str], grpc_target: str) -> None:
    out, err = await run_client(
        client, "run", "--addr", grpc_target, "--approve", "--drop-after", "5", PROMPT
    )
    assert "[reconnect] attach after " in err
    text, _ = await recorded_text(grpc_target, err)
    assert out == text
    assert len(re.findall(r"^\[approve\]", err, re.MULTILINE)) == 1


async def test_receives_a_message_past_the_default_grpc_limit(
    client: list[str], server_factory: ServerFactory
) -> None:
    """The answer is one text message of about 12 MB, nearly three times
    gRPC's default receive limit (4 MiB): each client must set the server's
    message size (129 MiB, ``message_size.py``) to read it."""
    server = await server_factory(engine_options={"repeat": "120"})
    assert server.grpc is not None
    prompt = "q" * 100_000  # within one command-line argument's limit (128 KiB)
    out, err = await run_client(client, "run", "--addr", server.grpc.address, prompt)
    text, _ = await recorded_text(server.grpc.address, err)
    assert len(text) > 2 * (4 << 20) and out == text
    assert out.count(repr(prompt)) == 120


async def test_aborts(client: list[str], grpc_target: str) -> None:
    # ASK mode and no answer: the task is parked at the tool call when Abort lands.
    _, err = await run_client(client, "run", "--addr", grpc_target, "--abort-after", "3", PROMPT)
    assert "[abort] requested, was running: true" in err
    assert err.rstrip().endswith("[aborted] stopped by omni-client")
    _, history = await recorded_text(grpc_target, err)
    assert history[-1].WhichOneof("payload") == "abort"
    assert history[-1].abort.reason == "stopped by omni-client"


async def test_a_run_the_server_stopped_is_an_error(
    client: list[str], server_factory: ServerFactory, small_disk: SmallDisk
) -> None:
    """The disk fills during the run: task_state IDLE, then RESOURCE_EXHAUSTED
    as the Run call's status. A client that stops reading at IDLE exits 0."""
    server = await server_factory(
        data_dir=small_disk.path / "data", engine_options={"repeat": "200"}
    )
    assert server.grpc is not None
    small_disk.leave(pages=2)  # the run starts, its answer does not fit
    proc = await asyncio.create_subprocess_exec(
        *client, "run", "--addr", server.grpc.address, "fill it",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode == 1, err.decode()
    assert "trace could not be written" in err.decode()
    assert "[reconnect]" not in err.decode()  # the task was over: nothing to re-attach to
