"""The Node example client (@connectrpc/connect-node, the generated stubs)
over Connect (proto and JSON) and gRPC-Web on the Python server's HTTP port,
HTTP/1.1: stream, approve, abort, resume after a dropped call with
after_event_id, and each message's include_json bytes equal to the trace's."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest
from connect_serving import Served, serving

from omni_grpc.client import AgentClient
from omni_grpc_proto.omni.v1 import omni_pb2
from polyglot.polyglot_builds import build_node

PROMPT = "list the workspace"
PROTOCOLS = ["connect", "connect-json", "grpc-web"]
pytestmark = pytest.mark.parametrize("protocol", PROTOCOLS)


async def node(served: Served, protocol: str, *args: str) -> tuple[str, str]:
    address = served.base_url.removeprefix("http://")
    proc = await asyncio.create_subprocess_exec(
        *build_node(), "run", "--addr", address, "--protocol", protocol, *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode == 0, f"client.js {protocol} {args} failed:\n{err.decode()}"
    return out.decode(), err.decode()


async def recorded(
    served: Served, stderr: str
) -> tuple[str, list[omni_pb2.OmniMessage], list[bytes]]:
    match = re.search(r"^\[session\] (\S+)$", stderr, re.MULTILINE)
    assert match, stderr
    async with AgentClient(served.grpc_target) as agent:
        history = [m async for m in agent.history(match.group(1))]
        lines = [line async for line in agent.history_lines(match.group(1))]
    text = "".join(
        m.text.text + "\n"
        for m in history
        if m.WhichOneof("payload") == "text" and m.text.role == omni_pb2.ROLE_ASSISTANT
    )
    return text, history, lines


async def test_streams_and_approves(tmp_path: Path, protocol: str) -> None:
    async with serving(tmp_path / "data") as served:
        out, err = await node(served, protocol, "--approve", PROMPT)
        text, history, _ = await recorded(served, err)
    assert text and out == text
    assert re.search(r"^\[approve\] list_workspace \S+$", err, re.MULTILINE)
    decisions = [m for m in history if m.WhichOneof("payload") == "approval_decision"]
    assert [d.approval_decision.decision for d in decisions] == [omni_pb2.DECISION_ALLOW]


async def test_aborts(tmp_path: Path, protocol: str) -> None:
    async with serving(tmp_path / "data") as served:
        _, err = await node(served, protocol, "--abort-after", "3", PROMPT)
        _, history, _ = await recorded(served, err)
    assert "[abort] requested, was running: true" in err
    assert err.rstrip().endswith("[aborted] stopped by omni-client")
    assert history[-1].abort.reason == "stopped by omni-client"


async def test_resumes_after_a_dropped_call_losslessly(tmp_path: Path, protocol: str) -> None:
    """Dropped mid-run, re-attached after the last event id: every message
    once, and each one's include_json is its trace line, byte for byte."""
    async with serving(tmp_path / "data") as served:
        out, err = await node(
            served, protocol, "--approve", "--drop-after", "5", "--print-json", PROMPT
        )
        _, _, lines = await recorded(served, err)
    assert "[reconnect] attach after " in err
    assert len(re.findall(r"^\[approve\]", err, re.MULTILINE)) == 1
    printed = [line.encode() for line in out.splitlines()]
    # The stream also carries partial_* messages, which no trace records.
    complete = [line for line in printed if b'"type":"partial_' not in line]
    assert complete == [line for line in lines if b'"type":"session_meta"' not in line]
