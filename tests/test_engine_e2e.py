"""Every real engine end to end: a real gRPC server, the client library, real traces."""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ServerFactory
from fakes.openai_server import FakeOpenAI, error_reply, stall_reply, text_reply, tool_calls_reply

from omni_grpc.client import AgentClient, StreamEvent
from omni_grpc.convert import message_to_dict, parse_message, serialize_message
from omni_grpc.runtime.approvals import ApprovalMode
from omni_grpc.server import OmniServer
from omni_grpc.trace import TraceRecord, read_jsonl
from omni_grpc.trace.validate import validate_records
from omni_grpc_proto.omni.v1 import omni_pb2

TESTS = Path(__file__).parent
NODE_ENGINE = TESTS.parent / "examples" / "node-engine" / "engine.mjs"
BAD_ENGINE = TESTS / "fakes" / "bad_engine.py"
BASIC_TRACE = TESTS / "conformance" / "trace_basic_tool_turn_001.jsonl"


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


async def run_task(
    client: AgentClient,
    prompt: str,
    *,
    session_id: str | None = None,
    approve: str | None = None,
    abort_on: str | None = None,
    timeout: float = 20,
) -> tuple[str, list[StreamEvent]]:
    """One Run through the task's end; answers approval requests, may abort on a kind."""
    stream = client.run(prompt, session_id=session_id)
    sid = await stream.session()
    events: list[StreamEvent] = []

    async def read() -> None:
        aborted = False
        async for event in stream:
            events.append(event)
            if event.kind == "@approval_request" and approve is not None:
                call = event.server_event.approval_request.tool_call  # type: ignore[union-attr]
                await client.approve(sid, call.tool_call.tool_call_id, approve)
            if abort_on is not None and event.kind == abort_on and not aborted:
                aborted = True
                await client.abort(sid, "stopped from the client")
            if event.is_task_end:
                return

    await asyncio.wait_for(read(), timeout)
    return sid, events


def payloads(events: list[StreamEvent], kind: str | None = None) -> list[dict[str, object]]:
    out = []
    for e in events:
        if e.message is not None and (kind is None or e.kind == kind):
            out.append(message_to_dict(e.message)["payload"])
    return out


def messages(events: list[StreamEvent]) -> list[omni_pb2.OmniMessage]:
    return [e.message for e in events if e.message is not None]


def errors_in(msgs: list[omni_pb2.OmniMessage], *, trace: bool) -> list[str]:
    records = [TraceRecord(i + 1, m) for i, m in enumerate(msgs)]
    issues = validate_records(records, trace=trace)
    return [f"{i.line}: {i.code} {i.message}" for i in issues if i.severity == "error"]


def trace_of(server: OmniServer, session_id: str) -> list[omni_pb2.OmniMessage]:
    [stored] = [s for s in server.hub.traces.scan() if s.session_id == session_id]
    return [r.message for r in read_jsonl(server.hub.traces.paths(stored)[-1])]


def target(server: OmniServer) -> str:
    assert server.grpc is not None
    return server.grpc.address


# ---- openai ----------------------------------------------------------------------------


async def test_openai_over_grpc_with_approvals_and_resume_after_restart(
    server_factory: ServerFactory, fake: FakeOpenAI, tmp_path: Path
) -> None:
    options = {"base_url": fake.base_url, "model": "fake-model", "retry_base_ms": "10"}
    data_dir = tmp_path / "data"
    server = await server_factory(engine="openai", engine_options=options, data_dir=data_dir,
                                  approval_mode=ApprovalMode.ASK)  # fmt: skip
    fake.script(
        tool_calls_reply([("call_1", "list_directory", '{"path": "."}')]),
        text_reply("The workspace is empty."),
    )
    async with AgentClient(target(server)) as client:
        sid, events = await run_task(client, "what is here?", approve="allow")
    assert [e.kind for e in events if e.kind.startswith("@approval")] == ["@approval_request"]
    assert payloads(events, "approval_decision")[0]["decision"] == "allow"
    assert payloads(events, "tool_call_output")[0]["output"] == ".:\n[empty directory]"
    assert payloads(events, "text")[-1]["text"] == "The workspace is empty."
    assert errors_in(messages(events), trace=False) == []
    assert errors_in(trace_of(server, sid), trace=True) == []
    # session_meta describes the model.
    meta = message_to_dict(trace_of(server, sid)[0])["payload"]
    assert (meta["provider"], meta["model_id"]) == ("openai", "fake-model")

    # A restarted server resumes the conversation from the trace alone.
    await server.stop()
    server = await server_factory(engine="openai", engine_options=options, data_dir=data_dir)
    fake.script(text_reply("Still empty."))
    async with AgentClient(target(server)) as client:
        _, events = await run_task(client, "and now?", session_id=sid)
    assert payloads(events, "text")[-1]["text"] == "Still empty."
    sent = fake.requests[-1].body["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool", "assistant", "user"]
    assert sent[1] == {"role": "user", "content": "what is here?"}
    assert sent[3] == {"role": "tool", "tool_call_id": "call_1", "content": ".:\n[empty directory]"}
    assert sent[-1] == {"role": "user", "content": "and now?"}


async def test_openai_retries_and_abort_over_grpc(
    server_factory: ServerFactory, fake: FakeOpenAI
) -> None:
    server = await server_factory(
        engine="openai", engine_options={"base_url": fake.base_url, "model": "m",
                                         "retry_base_ms": "10"},
    )  # fmt: skip
    fake.script(error_reply(500, "boom"), text_reply("fine"), stall_reply(30, after_text="Let"))
    async with AgentClient(target(server)) as client:
        _, events = await run_task(client, "hi")
        assert [p["status"] for p in payloads(events, "request_end")] == ["failed", "completed"]
        sid, events = await run_task(client, "again", abort_on="partial_text")
    assert payloads(events)[-1] == {"type": "abort", "reason": "stopped from the client"}
    assert payloads(events, "request_end")[-1] == {
        "type": "request_end", "status": "aborted", "attempt": 1,
    }  # fmt: skip
    assert errors_in(trace_of(server, sid), trace=True) == []


async def test_openai_auth_failure_over_grpc(
    server_factory: ServerFactory, fake: FakeOpenAI
) -> None:
    options = {"base_url": fake.base_url, "model": "m"}
    server = await server_factory(engine="openai", engine_options=options)
    fake.script(error_reply(401, "invalid x-api-key"))
    async with AgentClient(target(server)) as client:
        _, events = await run_task(client, "hi")
    assert payloads(events)[-2:] == [
        {"type": "request_end", "status": "auth", "error_message": "401 invalid x-api-key",
         "attempt": 1},
        {"type": "abort", "reason": "llm request error: 401 invalid x-api-key"},
    ]  # fmt: skip


# ---- command -----------------------------------------------------------------------------


@pytest.mark.skipif(
    shutil.which("node") is None and not os.environ.get("OMNI_REQUIRE_TOOLCHAINS"),
    reason="needs node",  # in CI a missing node fails the test instead
)
async def test_the_node_engine_over_grpc(server_factory: ServerFactory) -> None:
    server = await server_factory(
        engine=f"command:node {shlex.quote(str(NODE_ENGINE))}", approval_mode=ApprovalMode.ASK
    )
    async with AgentClient(target(server)) as client:
        sid, events = await run_task(client, "list the files", approve="deny")
    assert payloads(events, "approval_decision")[0]["decision"] == "deny"
    assert payloads(events, "text")[-1]["text"] == "Understood, I will not look."
    assert errors_in(messages(events), trace=False) == []
    assert errors_in(trace_of(server, sid), trace=True) == []


async def test_a_crashing_child_fails_its_run_and_the_server_keeps_serving(
    server_factory: ServerFactory,
) -> None:
    crash = f"command:{shlex.quote(sys.executable)} {shlex.quote(str(BAD_ENGINE))} crash"
    server = await server_factory(engine=crash)
    async with AgentClient(target(server)) as client:
        results = [await run_task(client, f"attempt {i}") for i in range(3)]
        sessions = await client.list_sessions()
    for sid, events in results:
        end = payloads(events, "request_end")[-1]
        assert end["status"] == "failed"
        assert str(end["error_message"]).startswith("engine process exited with code 3")
        assert payloads(events)[-1]["type"] == "abort"
        assert errors_in(messages(events), trace=False) == []
        assert errors_in(trace_of(server, sid), trace=True) == []
    assert len(sessions) == 3


# ---- replay ------------------------------------------------------------------------------


async def test_replay_over_grpc_records_the_same_trace(server_factory: ServerFactory) -> None:
    server = await server_factory(engine=f"replay:{BASIC_TRACE}",
                                  engine_options={"delay_ms": "0"})  # fmt: skip
    prompt = "Create hello.txt containing “hi” — then read it back"
    async with AgentClient(target(server)) as client:
        sid, events = await run_task(client, prompt)
    assert errors_in(messages(events), trace=False) == []
    recorded = [parse_message(line) for line in BASIC_TRACE.read_bytes().splitlines()]
    replayed = trace_of(server, sid)
    # The new trace holds the recorded messages (new timestamps and session id).
    assert [message_to_dict(m)["payload"] for m in replayed[1:]] == [
        message_to_dict(m)["payload"] for m in recorded[1:]
    ]
    assert message_to_dict(replayed[0])["payload"]["model_id"] == "deepseek-v4-pro"


# ---- grpc upstream -------------------------------------------------------------------------


async def test_a_gateway_proxies_another_agent_service_losslessly(
    server_factory: ServerFactory,
) -> None:
    upstream = await server_factory(engine=f"replay:{BASIC_TRACE}",
                                    engine_options={"delay_ms": "0"})  # fmt: skip
    gateway = await server_factory(engine=f"grpc://{target(upstream)}",
                                   approval_mode=ApprovalMode.ASK)  # fmt: skip
    async with AgentClient(target(gateway)) as client:
        sid, events = await run_task(client, "go", approve="allow")
        # A second run continues the same upstream session.
        await run_task(client, "again", session_id=sid, approve="allow")
    # The approval was asked here and answered upstream.
    assert [e.kind for e in events].count("@approval_request") == 1
    assert payloads(events, "approval_decision")[0]["decision"] == "allow"
    assert errors_in(messages(events), trace=False) == []

    [upstream_info] = [s for s in upstream.hub.traces.scan()]
    upstream_trace = trace_of(upstream, upstream_info.session_id)
    gateway_trace = trace_of(gateway, sid)
    # Everything after session_meta is byte for byte what the upstream recorded.
    assert [serialize_message(m) for m in gateway_trace[1:]] == [
        serialize_message(m) for m in upstream_trace[1:]
    ]
    assert sum(1 for m in upstream_trace if m.WhichOneof("payload") == "request_end") == 4


async def test_abort_and_denial_pass_through_the_gateway(server_factory: ServerFactory) -> None:
    upstream = await server_factory(engine=f"replay:{BASIC_TRACE}",
                                    engine_options={"delay_ms": "20"})  # fmt: skip
    gateway = await server_factory(engine=f"grpc://{target(upstream)}",
                                   approval_mode=ApprovalMode.ASK)  # fmt: skip
    async with AgentClient(target(gateway)) as client:
        _, denied = await run_task(client, "go", approve="deny")
        _, aborted = await run_task(client, "go", abort_on="partial_thinking")
    assert payloads(denied, "tool_call_output")[0]["output"] == "Tool call denied by user."
    assert payloads(aborted)[-1] == {"type": "abort", "reason": "stopped from the client"}
    assert errors_in(messages(aborted), trace=False) == []
    # The upstream run was aborted too, with the reason given at the gateway.
    upstream_sessions = sorted(upstream.hub.traces.scan(), key=lambda s: s.created_at)
    last = trace_of(upstream, upstream_sessions[-1].session_id)
    assert message_to_dict(last[-1])["payload"] == {
        "type": "abort", "reason": "stopped from the client"
    }  # fmt: skip


async def test_an_unreachable_upstream_fails_the_run_clearly(
    server_factory: ServerFactory,
) -> None:
    gateway = await server_factory(engine="grpc://127.0.0.1:1")
    async with AgentClient(target(gateway)) as client:
        sid, events = await run_task(client, "hello?")
    end = payloads(events, "request_end")[-1]
    assert end["status"] == "failed"
    assert str(end["error_message"]).startswith("upstream AgentService 127.0.0.1:1: UNAVAILABLE")
    assert payloads(events)[-1]["type"] == "abort"
    assert errors_in(trace_of(gateway, sid), trace=True) == []


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"grace_ms": "-1"}, "grace_ms='-1' must not be negative"),
        ({"grace_ms": "nan"}, "grace_ms='nan' must not be negative"),
        ({"grace_ms": "soon"}, "grace_ms='soon' is not a number"),
        ({"colour": "blue"}, "unknown option(s) colour"),
    ],
)
def test_the_gateway_refuses_bad_options_at_startup(options: dict[str, str], message: str) -> None:
    from omni_grpc.engines.grpc_upstream import create

    with pytest.raises(ValueError, match=re.escape(message)):
        create("grpc://127.0.0.1:1", **options)
