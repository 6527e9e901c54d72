"""AgentService against a real grpc.aio server on loopback, through the client library."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import orjson
import pytest
from conftest import ServerFactory
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from omni_grpc.client import AgentClient, AgentError, StreamEvent
from omni_grpc.convert import message_to_dict, serialize_message
from omni_grpc.runtime.approvals import ApprovalMode
from omni_grpc.server import OmniServer
from omni_grpc.trace import TraceRecord, read_jsonl
from omni_grpc.trace.validate import validate_records
from omni_grpc_proto.omni.v1 import agent_service_pb2 as pb
from omni_grpc_proto.omni.v1 import agent_service_pb2_grpc, omni_pb2


async def collect(stream: object, timeout: float = 10) -> list[StreamEvent]:
    out: list[StreamEvent] = []

    async def read() -> None:
        async for event in stream:  # type: ignore[attr-defined]
            out.append(event)
            if event.is_task_end:
                return

    await asyncio.wait_for(read(), timeout)
    return out


def errors_in(messages: list[omni_pb2.OmniMessage], *, trace: bool) -> list[str]:
    records = [TraceRecord(i + 1, m) for i, m in enumerate(messages)]
    return [
        f"{i.line}: {i.code} {i.message}"
        for i in validate_records(records, trace=trace)
        if i.severity == "error"
    ]


def trace_of(server: OmniServer, session_id: str) -> list[omni_pb2.OmniMessage]:
    [stored] = [s for s in server.hub.traces.scan() if s.session_id == session_id]
    return [r.message for r in read_jsonl(server.hub.traces.paths(stored)[0])]


def payload(event: StreamEvent) -> dict[str, object]:
    assert event.message is not None
    result: dict[str, object] = message_to_dict(event.message)["payload"]
    return result


async def test_the_demo_stream_is_valid_and_fully_labelled(
    omni_server: OmniServer, grpc_target: str
) -> None:
    async with AgentClient(grpc_target) as client:
        stream = client.run("hello over grpc")
        session_id = await stream.session()
        events = await collect(stream)
    assert all(e.session_id == session_id for e in events)
    epochs = {e.event_id.rsplit("-", 1)[0] for e in events}
    seqs = [int(e.event_id.rsplit("-", 1)[1]) for e in events]
    assert len(epochs) == 1 and seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    assert [e.kind for e in events[:2]] == ["text", "@task_state"]
    assert events[-1].is_task_end
    messages = [e.message for e in events if e.message is not None]
    kinds = {m.WhichOneof("payload") for m in messages}
    assert {"partial_thinking", "partial_tool_call_output", "approval_decision"} <= kinds
    assert errors_in(messages, trace=False) == []
    # The trace on disk passes the trace rules, and GetHistory serves it verbatim.
    trace = trace_of(omni_server, session_id)
    assert errors_in(trace, trace=True) == []
    async with AgentClient(grpc_target) as client:
        history = [m async for m in client.history(session_id)]
        [info] = await client.list_sessions()
    assert [serialize_message(m) for m in history] == [serialize_message(m) for m in trace]
    assert info.session_id == session_id and info.state == pb.SESSION_STATE_IDLE
    assert info.message_count == len(trace) and info.last_event_id == events[-1].event_id


async def test_abort_rpc_still_delivers_the_final_abort(
    server_factory: ServerFactory,
) -> None:
    server = await server_factory(engine_options={"pacing": "0.02"})
    assert server.grpc is not None
    async with AgentClient(server.grpc.address) as client:
        stream = client.run("abort me")
        events: list[StreamEvent] = []
        async for event in stream:
            events.append(event)
            if event.kind == "partial_thinking" and len(events) < 6:
                assert await client.abort(event.session_id, "user pressed stop")
            if event.is_task_end:
                break
        session_id = events[0].session_id
        assert not await client.abort(session_id)  # idle now
    assert [e.kind for e in events[-2:]] == ["abort", "@task_state"]
    assert payload(events[-2]) == {"type": "abort", "reason": "user pressed stop"}
    messages = [e.message for e in events if e.message is not None]
    assert errors_in(messages, trace=False) == []
    trace = trace_of(server, session_id)
    assert errors_in(trace, trace=True) == []
    assert trace[-1].WhichOneof("payload") == "abort"


@pytest.mark.parametrize("detach", [False, True])
async def test_cancelling_run_aborts_unless_detached(
    server_factory: ServerFactory, detach: bool
) -> None:
    server = await server_factory(engine_options={"pacing": "0.02"})
    assert server.grpc is not None
    async with AgentClient(server.grpc.address) as client:
        stream = client.run("cancel me", detach_on_cancel=detach)
        seen: list[StreamEvent] = []
        async for event in stream:
            seen.append(event)
            if event.kind == "partial_text":
                stream.cancel()
                break
        session_id = seen[0].session_id
        await asyncio.wait_for(server.hub.wait_idle(session_id), 10)
        # Either way the run reached a clean end that Attach can replay.
        rest = [e async for e in client.attach(session_id, seen[-1].event_id, until_idle=True)]
    trace = trace_of(server, session_id)
    assert errors_in(trace, trace=True) == []
    kinds = [m.WhichOneof("payload") for m in trace]
    if detach:
        assert "abort" not in kinds and kinds[-1] == "request_end"
    else:
        assert kinds[-1] == "abort"
        assert trace[-1].abort.reason == "the Run call was cancelled"
    full = [e.message for e in seen + rest if e.message is not None]
    assert errors_in(full, trace=False) == []


async def test_deny_and_ask_approval_paths(server_factory: ServerFactory) -> None:
    # The operator lets clients pick ask, which is wider than its deny-all.
    server = await server_factory(
        approval_mode=ApprovalMode.DENY_ALL,
        client_modes=(ApprovalMode.DENY_ALL, ApprovalMode.ASK),
    )
    assert server.grpc is not None
    async with AgentClient(server.grpc.address) as client:
        denied = await collect(client.run("server default denies"))
        decisions = [payload(e)["decision"] for e in denied if e.kind == "approval_decision"]
        assert decisions == ["deny"]
        outputs = [payload(e) for e in denied if e.kind == "tool_call_output"]
        assert outputs[0]["output"] == "Tool call denied by user."

        stream = client.run("ask me", approval_mode="ask")
        events: list[StreamEvent] = []
        async for event in stream:
            events.append(event)
            if event.kind == "@approval_request":
                assert event.server_event is not None
                call = event.server_event.approval_request.tool_call.tool_call
                with pytest.raises(AgentError) as missing:
                    await client.approve(event.session_id, "call_nope", "allow")
                assert missing.value.code == grpc.StatusCode.NOT_FOUND
                await client.approve(event.session_id, call.tool_call_id, "allow")
            if event.is_task_end:
                break
    decisions = [payload(e)["decision"] for e in events if e.kind == "approval_decision"]
    assert decisions == ["allow"]
    assert any(e.kind == "partial_tool_call_output" for e in events)


async def test_concurrent_sessions_do_not_mix(server_factory: ServerFactory) -> None:
    server = await server_factory(engine_options={"pacing": "0.002"})
    assert server.grpc is not None
    async with AgentClient(server.grpc.address) as client:
        runs = await asyncio.gather(*(collect(client.run(f"prompt {n}")) for n in range(4)))
    session_ids = [run[0].session_id for run in runs]
    assert len(set(session_ids)) == 4
    for n, run in enumerate(runs):
        assert {e.session_id for e in run} == {session_ids[n]}
        assert payload(run[0])["text"] == f"prompt {n}"
        assert errors_in([e.message for e in run if e.message], trace=False) == []


async def test_attach_after_a_disconnect_loses_nothing(server_factory: ServerFactory) -> None:
    server = await server_factory(engine_options={"pacing": "0.01"})
    assert server.grpc is not None
    async with AgentClient(server.grpc.address) as client:
        stream = client.run("keep going", detach_on_cancel=True)
        first: list[StreamEvent] = []
        async for event in stream:
            first.append(event)
            if len(first) == 12:
                stream.cancel()
                break
        session_id = first[0].session_id
        rest = [e async for e in client.attach(session_id, first[-1].event_id, until_idle=True)]
    buffered_rest = [e for e in rest if e.kind != "@task_state" or e.is_task_end]
    seqs = [int(e.event_id.rsplit("-", 1)[1]) for e in first + buffered_rest]
    assert seqs == sorted(seqs) and len(seqs) == len(set(seqs))
    # Everything recorded was seen, in order, across the two calls.
    seen = [serialize_message(e.message) for e in first + rest if e.message is not None]
    recorded = [serialize_message(m) for m in trace_of(server, session_id)[1:]]
    assert [s for s in seen if s in set(recorded)] == recorded
    assert errors_in([e.message for e in first + rest if e.message], trace=False) == []


async def test_attach_with_an_evicted_id_gets_resync(server_factory: ServerFactory) -> None:
    # Paced so this Run's own reader keeps up with a 5-event buffer.
    server = await server_factory(buffer_events=5, engine_options={"pacing": "0.002"})
    assert server.grpc is not None
    async with AgentClient(server.grpc.address) as client:
        events = await collect(client.run("fill the buffer"))
        session_id = events[0].session_id
        attached = client.attach(session_id, events[1].event_id)
        first = await anext(attached)
        second = await anext(attached)
        await attached.aclose()
        # A foreign epoch misses too; a recent id hits.
        recent = client.attach(session_id, events[-3].event_id)
        replayed = [await anext(recent) for _ in range(2)]
        await recent.aclose()
    assert first.kind == "@resync_required" and first.to_json() == b'{"type":"resync_required"}'
    assert second.kind == "@task_state"
    assert [e.event_id for e in replayed] == [e.event_id for e in events[-2:]]


async def test_a_lone_fast_reader_gets_a_run_many_times_the_buffer(
    server_factory: ServerFactory,
) -> None:
    # Zero pacing: the engine writes far faster than gRPC sends. The run's only
    # reader reads as fast as it can, so it holds the engine back instead of
    # being cut off (it used to get a few thousand events, then resync_required).
    server = await server_factory(buffer_events=50, engine_options={"repeat": "200"})
    assert server.grpc is not None
    async with AgentClient(server.grpc.address) as client:
        events = await collect(client.run("a long answer"))
    kinds = [e.kind for e in events]
    assert "@resync_required" not in kinds and kinds[-1] == "@task_state"
    assert len(events) > 20 * 50
    seqs = [int(e.event_id.rsplit("-", 1)[1]) for e in events]
    assert seqs == list(range(1, len(events) + 1))  # every event, none skipped


async def test_a_stream_past_the_session_limit_is_resource_exhausted(
    server_factory: ServerFactory,
) -> None:
    server = await server_factory(max_streams_per_session=1)
    assert server.grpc is not None
    async with AgentClient(server.grpc.address) as client:
        session_id = (await collect(client.run("hi")))[0].session_id
        watching = client.attach(session_id)
        await anext(watching)  # one stream open
        with pytest.raises(AgentError) as refused:
            await anext(client.attach(session_id))
        await watching.aclose()
    assert refused.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "--max-streams-per-session" in str(refused.value)


def test_the_stream_limit_is_429_over_http() -> None:
    from omni_grpc.runtime.errors import TooManyStreams
    from omni_grpc.transport.sse.errors import hub_error_status

    assert hub_error_status(TooManyStreams("s1", 3)) == (429, "too_many_streams")


async def test_a_busy_session_is_refused_with_details(server_factory: ServerFactory) -> None:
    server = await server_factory(engine_options={"pacing": "0.05"})
    assert server.grpc is not None
    async with grpc.aio.insecure_channel(server.grpc.address) as channel:
        stub = agent_service_pb2_grpc.AgentServiceStub(channel)
        call = stub.Run(pb.RunRequest(prompt="long"))
        first = await anext(aiter(call))
        with pytest.raises(grpc.aio.AioRpcError) as busy:
            async for _ in stub.Run(pb.RunRequest(session_id=first.session_id, prompt="again")):
                pass
        call.cancel()
    assert busy.value.code() == grpc.StatusCode.ABORTED
    status = rpc_status.from_call(busy.value)
    assert status is not None
    failure = error_details_pb2.PreconditionFailure()
    assert status.details[0].Unpack(failure)
    assert failure.violations[0].type == "TASK_IN_PROGRESS"
    assert failure.violations[0].subject == first.session_id


@pytest.mark.parametrize(
    ("request_", "field"),
    [
        (pb.RunRequest(), "input"),
        (pb.RunRequest(prompt="x", thinking_level=99), "thinking_level"),  # type: ignore[arg-type]
        (pb.RunRequest(prompt="x", approval_mode=42), "approval_mode"),  # type: ignore[arg-type]
        (pb.RunRequest(input=[omni_pb2.OmniMessage()]), "input[0].payload"),
        (
            pb.RunRequest(
                input=[omni_pb2.OmniMessage(partial_text=omni_pb2.PartialText(text="x"))]
            ),
            "input[0].payload",
        ),
        (pb.RunRequest(prompt="x", session_id="no/slashes"), "session_id"),
    ],
)
async def test_malformed_runs_name_the_field(
    grpc_target: str, request_: pb.RunRequest, field: str
) -> None:
    async with grpc.aio.insecure_channel(grpc_target) as channel:
        stub = agent_service_pb2_grpc.AgentServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as bad:
            async for _ in stub.Run(request_):
                pass
    assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field in (bad.value.details() or "")
    status = rpc_status.from_call(bad.value)
    assert status is not None
    violations = error_details_pb2.BadRequest()
    assert status.details[0].Unpack(violations)
    assert violations.field_violations[0].field == field


async def test_other_rpcs_refuse_bad_requests(grpc_target: str) -> None:
    async with AgentClient(grpc_target) as client:
        with pytest.raises(AgentError) as unknown:
            await client.abort("session-unknown")
        assert unknown.value.code == grpc.StatusCode.NOT_FOUND
        with pytest.raises(AgentError) as no_id:
            await client.abort("")
        assert no_id.value.field_violations == [("session_id", "is required")]
        with pytest.raises(AgentError) as history:
            [m async for m in client.history("session-unknown")]
        assert history.value.code == grpc.StatusCode.NOT_FOUND
        with pytest.raises(AgentError) as attach:
            [e async for e in client.attach("session-unknown")]
        assert attach.value.code == grpc.StatusCode.NOT_FOUND
    async with grpc.aio.insecure_channel(grpc_target) as channel:
        stub = agent_service_pb2_grpc.AgentServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as decision:
            await stub.Approve(pb.ApproveRequest(session_id="s", tool_call_id="c"))
    assert decision.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "decision" in (decision.value.details() or "")


async def test_sessions_are_listed_and_served_after_a_restart(
    server_factory: ServerFactory, tmp_path: Path
) -> None:
    data = tmp_path / "shared"
    first = await server_factory(data_dir=data)
    assert first.grpc is not None
    async with AgentClient(first.grpc.address) as client:
        events = await collect(client.run("before the restart"))
        before = [serialize_message(m) async for m in client.history(events[0].session_id)]
    await first.stop()
    second = await server_factory(data_dir=data)
    assert second.grpc is not None
    async with AgentClient(second.grpc.address) as client:
        [info] = await client.list_sessions()
        after = [serialize_message(m) async for m in client.history(info.session_id)]
        again = await collect(client.run("after", session_id=info.session_id))
    assert info.session_id == events[0].session_id and after == before
    assert orjson.loads(again[0].to_json())["payload"]["text"] == "after"
