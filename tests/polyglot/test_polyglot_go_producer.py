"""A non-Python producer: the scripted Go AgentService, consumed from Python.

The Go server's turn is fixed (scripted_turn.jsonl is what it must say, in
reference JSON, for PROMPT), so every consumer must reproduce those lines
exactly: the generated Python stub, the client library, ``omni-grpc run
--target --json``, and the gateway ``omni-grpc serve --engine grpc://``
over both its gRPC and its reference SSE transports.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import grpc
import httpx

from omni_grpc.client import AgentClient
from omni_grpc.convert import parse_server_event, serialize_message
from omni_grpc_proto.omni.v1 import agent_service_pb2 as pb
from omni_grpc_proto.omni.v1 import agent_service_pb2_grpc

PROMPT = "hello polyglot"
SCRIPT = (Path(__file__).parent / "scripted_turn.jsonl").read_text().splitlines()


def test_the_scripted_session_totals_sum_its_requests() -> None:
    """What the Go server must send (checked against it below) adds up: every
    view of the session's tokens (run, SSE done, history) agrees."""
    usages = [m["payload"] for m in map(json.loads, SCRIPT)
              if m["payload"]["type"] == "token_usage"]  # fmt: skip
    running = {"cache_read": 0, "cache_write": 0, "output": 0, "total": 0}
    for usage in usages:
        running = {k: running[k] + usage["request"][k] for k in running}
        assert usage["session"] == running
    assert running["total"] == 54


def test_generated_python_stub(go_server: str) -> None:
    with grpc.insecure_channel(go_server) as channel:
        stub = agent_service_pb2_grpc.AgentServiceStub(channel)
        responses = list(stub.Run(pb.RunRequest(prompt=PROMPT), timeout=30))
    got = [serialize_message(r.message).decode() for r in responses if r.HasField("message")]
    assert got == SCRIPT
    events = [r.event.WhichOneof("kind") for r in responses if r.HasField("event")]
    assert events == ["task_state", "task_state"]
    assert len({r.event_id for r in responses}) == len(responses)


async def test_python_client_library(go_server: str) -> None:
    async with AgentClient(go_server) as agent:
        got = [
            serialize_message(event.message).decode()
            async for event in agent.run(PROMPT, approval_mode="allow")
            if event.message is not None
        ]
    assert got == SCRIPT


async def test_python_client_library_approves_in_ask_mode(go_server: str) -> None:
    async with AgentClient(go_server) as agent:
        got = []
        async for event in agent.run(PROMPT, approval_mode="ask"):
            if event.server_event is not None and event.kind == "@approval_request":
                call = event.server_event.approval_request.tool_call.tool_call
                await agent.approve(event.session_id, call.tool_call_id, "allow")
            elif event.message is not None:
                got.append(serialize_message(event.message).decode())
    assert got == SCRIPT


def test_omni_grpc_run_target(go_server: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "omni_grpc", "run", PROMPT, "--target", go_server, "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == SCRIPT


async def sse_events(http: httpx.AsyncClient, url: str) -> AsyncIterator[tuple[str, str]]:
    """(event name, data) pairs of a reference SSE stream, straight off the wire."""
    async with http.stream("GET", url) as response:
        assert response.status_code == 200
        name, data = "", []
        async for line in response.aiter_lines():
            if line == "":
                if data:
                    yield name, "\n".join(data)
                name, data = "", []
            elif line.startswith("event: "):
                name = line.removeprefix("event: ")
            elif line.startswith("data: "):
                data.append(line.removeprefix("data: "))


async def test_sse_gateway(go_server: str, serve_process: Callable[..., Any]) -> None:
    gateway = serve_process("--engine", f"grpc://{go_server}")
    base = f"http://{gateway.http_address}"
    async with httpx.AsyncClient(timeout=30) as http:
        created = await http.post(f"{base}/api/sessions", json={})
        assert created.status_code == 201
        sid = created.json()["session"]["sessionId"]
        messages: list[str] = []
        states: list[int] = []

        async def watch() -> None:
            async for name, data in sse_events(http, f"{base}/api/sessions/{sid}/stream"):
                if name == "server_event":
                    event = parse_server_event(data)
                    if event.WhichOneof("kind") == "task_state":
                        states.append(event.task_state.state)
                        ran = pb.SESSION_STATE_RUNNING in states
                        if ran and states[-1] == pb.SESSION_STATE_IDLE:
                            return
                else:
                    messages.append(data)

        watcher = asyncio.create_task(watch())
        while not states:  # the connect snapshot: now the stream is live
            await asyncio.sleep(0.02)
        task = await http.post(
            f"{base}/api/sessions/{sid}/tasks", json={"input": [{"type": "text", "text": PROMPT}]}
        )
        assert task.status_code == 202
        await asyncio.wait_for(watcher, timeout=60)

    assert_input_then_script(messages)


async def test_gateway_grpc(go_server: str, serve_process: Callable[..., Any]) -> None:
    gateway = serve_process("--engine", f"grpc://{go_server}", "--no-http")
    async with AgentClient(gateway.grpc_address) as agent:
        got = [
            serialize_message(event.message).decode()
            async for event in agent.run(PROMPT)
            if event.message is not None
        ]
    assert_input_then_script(got)


def assert_input_then_script(lines: list[str]) -> None:
    """The Python server publishes the task's input first (as reference SSE
    does), then the engine's stream: here, the Go server's script verbatim."""
    first = json.loads(lines[0])
    assert first["payload"]["role"] == "user" and first["payload"]["text"] == PROMPT
    assert lines[1:] == SCRIPT


async def test_gateway_keeps_call_ids_unique_when_the_upstream_repeats_them(
    go_server: str, serve_process: Callable[..., Any]
) -> None:
    """The Go script names its call call_1 in every run. Through the gateway two
    runs of one session record two distinct ids, each with its own approval and
    output, so a resumed trace keeps both outputs."""
    from omni_grpc.trace.resume import read_trace, resume_trace

    gateway = serve_process("--engine", f"grpc://{go_server}")
    async with AgentClient(gateway.grpc_address) as agent:
        session = None
        for _ in range(2):
            async for event in agent.run(PROMPT, session_id=session):
                session = event.session_id or session
    assert session is not None
    async with httpx.AsyncClient(base_url=f"http://{gateway.http_address}", timeout=10) as http:
        info = (await http.get(f"/api/sessions/{session}")).json()["session"]
    records, _ = read_trace(info["tracePath"])
    by_kind: dict[str, list[str]] = {}
    for record in records:
        payload = record["payload"]
        if "tool_call_id" in payload:
            by_kind.setdefault(payload["type"], []).append(payload["tool_call_id"])
    calls = by_kind["tool_call"]
    assert len(calls) == 2 and calls[0] == "call_1" and calls[1].startswith("call_1_")
    assert by_kind["approval_decision"] == calls and by_kind["tool_call_output"] == calls
    outputs = [
        m for m in resume_trace(records).history if m["payload"]["type"] == "tool_call_output"
    ]
    assert [m["payload"]["tool_call_id"] for m in outputs] == calls
