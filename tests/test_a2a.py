"""A2A over the hub, driven by the official Python SDK's client (``a2a-sdk``)
on each binding the card names: JSON-RPC, gRPC and HTTP+JSON."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from a2a.types import a2a_pb2 as a2a
from a2a_support import (
    BINDINGS,
    LOSSLESS,
    approval,
    artifact_texts,
    http_url,
    lossless_messages,
    sdk_client,
    start_server,
    state_of,
    task_id_of,
    user_message,
)

from omni_grpc.convert import serialize_message
from omni_grpc.runtime.limits import Limits
from omni_grpc.server import OmniServer
from omni_grpc.transport.a2a import extension
from omni_grpc.vocabulary import ApprovalMode

Start = Callable[..., Awaitable[OmniServer]]


@pytest.fixture
async def a2a_server(tmp_path: Path) -> AsyncIterator[Start]:
    servers: list[OmniServer] = []

    async def start(**overrides: Any) -> OmniServer:
        server = await start_server(tmp_path / f"data{len(servers)}", **overrides)
        servers.append(server)
        return server

    yield start
    for server in reversed(servers):
        await server.stop()


async def collect(stream: AsyncIterator[a2a.StreamResponse]) -> list[a2a.StreamResponse]:
    return [event async for event in stream]


async def recorded_texts(server: OmniServer, session_id: str) -> list[str]:
    return [
        m.text.text
        async for m in await server.hub.history(session_id)
        if m.HasField("text") and m.text.role == 2  # ROLE_ASSISTANT
    ]


async def test_the_card_names_every_binding_the_extension_and_the_tools(a2a_server: Start) -> None:
    server = await a2a_server()
    async with httpx.AsyncClient() as http:
        card = (await http.get(http_url(server) + "/.well-known/agent-card.json")).json()
    assert server.grpc is not None
    interfaces = [(i["protocolVersion"], i["protocolBinding"], i["url"]) for i in card[
        "supportedInterfaces"]]  # fmt: skip
    jsonrpc, rest = http_url(server) + "/a2a/jsonrpc", http_url(server) + "/a2a/rest"
    # The 1.0 interfaces first (a client takes the first it can use), then the
    # same HTTP endpoints for A2A 0.3 clients.
    assert interfaces == [
        ("1.0", "JSONRPC", jsonrpc),
        ("1.0", "HTTP+JSON", rest),
        ("1.0", "GRPC", server.grpc.address),
        ("0.3", "JSONRPC", jsonrpc),
        ("0.3", "HTTP+JSON", rest),
    ]
    # A 0.3 card's own fields: its main URL, transport and the others.
    assert (card["url"], card["preferredTransport"], card["protocolVersion"]) == (
        jsonrpc,
        "JSONRPC",
        "0.3",
    )
    assert card["additionalInterfaces"] == [{"url": rest, "transport": "HTTP+JSON"}]
    assert card["capabilities"]["streaming"] is True
    assert card["capabilities"].get("pushNotifications", False) is False
    assert [e["uri"] for e in card["capabilities"]["extensions"]] == [extension.URI]
    assert "tool:list_workspace" in [s["id"] for s in card["skills"]]
    assert "securitySchemes" not in card  # no token, no scheme


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_streamed_message_runs_a_task_to_completion(
    a2a_server: Start, binding: str
) -> None:
    server = await a2a_server()
    async with sdk_client(server, binding) as client:
        events = await collect(client.send_message(user_message("hi")))
    first = events[0]
    assert first.HasField("task")
    task_id, context_id = first.task.id, first.task.context_id
    assert [p.text for p in first.task.history[0].parts] == ["hi"]
    assert {task_id_of(e) for e in events} == {task_id}
    assert state_of(events[-1]) == a2a.TASK_STATE_COMPLETED
    assert [s for e in events if (s := state_of(e)) is not None][:2] == [
        a2a.TASK_STATE_SUBMITTED,
        a2a.TASK_STATE_WORKING,
    ]
    # The text artifacts are the assistant's recorded texts, chunk for chunk.
    assert artifact_texts(events, "text") == await recorded_texts(server, context_id)
    assert artifact_texts(events, "thinking")
    # The context is the hub's session: AgentService sees the same run.
    infos = {i.session_id: i for i in await server.hub.list_sessions()}
    assert infos[context_id].message_count > 0
    # Tool calls and their outputs are status messages with data parts.
    data = [
        p.data.struct_value
        for e in events
        if e.HasField("status_update")
        for p in e.status_update.status.message.parts
        if p.HasField("data")
    ]
    assert any("toolCall" in d.fields for d in data)
    assert any("toolCallOutput" in d.fields for d in data)


@pytest.mark.parametrize("binding", BINDINGS)
async def test_get_task_and_list_tasks_tell_what_the_stream_told(
    a2a_server: Start, binding: str
) -> None:
    server = await a2a_server()
    async with sdk_client(server, binding) as client:
        first = await collect(client.send_message(user_message("one")))
        context = first[0].task.context_id
        second = await collect(client.send_message(user_message("two", context_id=context)))
        assert second[0].task.context_id == context
        got = await client.get_task(a2a.GetTaskRequest(id=first[0].task.id))
        listed = await client.list_tasks(
            a2a.ListTasksRequest(context_id=context, include_artifacts=True)
        )
        other = await collect(client.send_message(user_message("three")))
        everything = await client.list_tasks(a2a.ListTasksRequest())
        paged = await client.list_tasks(a2a.ListTasksRequest(page_size=2))
        rest = await client.list_tasks(
            a2a.ListTasksRequest(page_size=2, page_token=paged.next_page_token)
        )
        later = a2a.ListTasksRequest()
        later.status_timestamp_after.CopyFrom(got.status.timestamp)
        after_first = await client.list_tasks(later)
        working = await client.list_tasks(a2a.ListTasksRequest(status=a2a.TASK_STATE_WORKING))
    assert got.status.state == a2a.TASK_STATE_COMPLETED
    assert got.context_id == context
    texts = [a for a in got.artifacts if a.name == "text"]
    assert ["".join(p.text for p in a.parts) for a in texts] == artifact_texts(first, "text")
    assert [t.id for t in listed.tasks] == [second[0].task.id, first[0].task.id]  # newest first
    assert listed.total_size == 2
    assert listed.tasks[1].artifacts == got.artifacts
    assert {t.id for t in everything.tasks} == {
        first[0].task.id,
        second[0].task.id,
        other[0].task.id,
    }
    assert len(paged.tasks) == 2 and paged.next_page_token
    assert [t.id for t in [*paged.tasks, *rest.tasks]] == [t.id for t in everything.tasks]
    assert not rest.next_page_token
    assert {t.id for t in after_first.tasks} == {second[0].task.id, other[0].task.id}
    assert list(working.tasks) == []
    assert all(t.status.state == a2a.TASK_STATE_COMPLETED for t in everything.tasks)


@pytest.mark.parametrize("binding", BINDINGS)
async def test_an_approval_is_asked_as_input_required_and_answered_by_a_message(
    a2a_server: Start, binding: str
) -> None:
    server = await a2a_server(approval_mode=ApprovalMode.ASK)
    async with sdk_client(server, binding) as client:
        # The stream closes by itself where the task waits for input.
        events = await collect(client.send_message(user_message("list my files")))
        assert state_of(events[-1]) == a2a.TASK_STATE_INPUT_REQUIRED
        assert [state_of(e) for e in events].count(a2a.TASK_STATE_INPUT_REQUIRED) == 1
        asked = events[-1].status_update.status.message
        data = next(p.data.struct_value for p in asked.parts if p.HasField("data"))
        call_id = data.fields["approvalRequest"].struct_value.fields["toolCallId"].string_value
        assert call_id
        task_id = task_id_of(events[-1])
        # The dropped stream did not abort the task: it still waits.
        waiting = await client.get_task(a2a.GetTaskRequest(id=task_id))
        assert waiting.status.state == a2a.TASK_STATE_INPUT_REQUIRED
        answered = await collect(client.send_message(approval(task_id, "allow", call_id)))
    assert answered[0].HasField("task") and answered[0].task.id == task_id
    assert state_of(answered[-1]) == a2a.TASK_STATE_COMPLETED
    decisions = [
        m.approval_decision
        async for m in await server.hub.history(waiting.context_id)
        if m.HasField("approval_decision")
    ]
    assert [(d.tool_call_id, d.decision) for d in decisions] == [(call_id, 1)]  # DECISION_ALLOW


async def test_an_approval_answered_on_agent_service_moves_the_a2a_task_on(
    a2a_server: Start,
) -> None:
    server = await a2a_server(approval_mode=ApprovalMode.ASK)
    async with sdk_client(server, "JSONRPC") as client:
        asked = await collect(client.send_message(user_message("list my files")))
        assert state_of(asked[-1]) == a2a.TASK_STATE_INPUT_REQUIRED
        # A subscriber follows the task across its wait, to its end.
        followed = client.subscribe(a2a.SubscribeToTaskRequest(id=task_id_of(asked[-1])))
        snapshot = await anext(followed)
        assert snapshot.task.status.state == a2a.TASK_STATE_INPUT_REQUIRED
        task = snapshot.task
        data = next(p.data for p in task.status.message.parts if p.HasField("data"))
        call = data.struct_value.fields["approvalRequest"].struct_value
        await server.hub.approve(task.context_id, call.fields["toolCallId"].string_value, "deny")
        events = [snapshot, *await collect(followed)]
    states = [s for e in events if (s := state_of(e)) is not None]
    assert states[-1] == a2a.TASK_STATE_COMPLETED
    assert a2a.TASK_STATE_WORKING in states[states.index(a2a.TASK_STATE_INPUT_REQUIRED) :]


@pytest.mark.parametrize("binding", BINDINGS)
async def test_no_stream_is_left_waiting_for_an_answer_that_never_comes(
    a2a_server: Start, binding: str
) -> None:
    """Where streams end (docs/a2a.md): a message's stream closes at
    TASK_STATE_INPUT_REQUIRED, and SubscribeToTask, which stays open across
    the wait, ends at the terminal state the run reaches once the unanswered
    request expires (``--max-approval-wait``): no client waits forever."""
    server = await a2a_server(approval_mode=ApprovalMode.ASK, limits=Limits(approval_wait=3.0))
    async with sdk_client(server, binding) as client, asyncio.timeout(60):
        asked = await collect(client.send_message(user_message("list my files")))
        assert state_of(asked[-1]) == a2a.TASK_STATE_INPUT_REQUIRED
        followed = await collect(
            client.subscribe(a2a.SubscribeToTaskRequest(id=task_id_of(asked[-1])))
        )
    states = [s for e in followed if (s := state_of(e)) is not None]
    assert states[0] == a2a.TASK_STATE_INPUT_REQUIRED  # it was still waiting
    assert states[-1] in (a2a.TASK_STATE_COMPLETED, a2a.TASK_STATE_FAILED), states


@pytest.mark.parametrize("binding", BINDINGS)
async def test_cancel_task_aborts_the_run(a2a_server: Start, binding: str) -> None:
    server = await a2a_server(engine_options={"pacing": "0.05"})
    async with sdk_client(server, binding) as client:
        stream = client.send_message(user_message("hi"))
        first = await anext(stream)
        task_id = task_id_of(first)
        async for event in stream:
            if event.HasField("artifact_update"):
                break  # the run is under way
        await stream.aclose()
        canceled = await client.cancel_task(a2a.CancelTaskRequest(id=task_id))
        assert canceled.status.state == a2a.TASK_STATE_CANCELED
        again = await client.get_task(a2a.GetTaskRequest(id=task_id))
        assert again.status.state == a2a.TASK_STATE_CANCELED
        with pytest.raises(Exception, match="already ended"):
            await client.cancel_task(a2a.CancelTaskRequest(id=task_id))
    recorded = [m async for m in await server.hub.history(canceled.context_id)]
    assert recorded[-1].HasField("abort")


@pytest.mark.parametrize("binding", BINDINGS)
async def test_subscribe_to_task_resumes_after_a_dropped_connection(
    a2a_server: Start, binding: str
) -> None:
    server = await a2a_server(approval_mode=ApprovalMode.ASK)
    async with sdk_client(server, binding) as client:
        seen: list[a2a.StreamResponse] = []
        async for event in client.send_message(user_message("list my files")):
            seen.append(event)
            if event.HasField("artifact_update"):
                break  # the connection drops mid-task
        task_id = task_id_of(seen[0])
    async with sdk_client(server, binding) as client:
        resumed = client.subscribe(a2a.SubscribeToTaskRequest(id=task_id))
        snapshot = await anext(resumed)
        assert snapshot.HasField("task") and snapshot.task.id == task_id
        rest: list[a2a.StreamResponse] = []
        if snapshot.task.status.state != a2a.TASK_STATE_INPUT_REQUIRED:
            async for event in resumed:
                rest.append(event)
                if state_of(event) == a2a.TASK_STATE_INPUT_REQUIRED:
                    break
        answered = asyncio.ensure_future(collect(client.send_message(approval(task_id, "allow"))))
        async for event in resumed:
            rest.append(event)
        assert state_of(rest[-1]) == a2a.TASK_STATE_COMPLETED
        assert state_of((await answered)[-1]) == a2a.TASK_STATE_COMPLETED
    # The snapshot's artifacts and the resumed chunks make the whole answer.
    texts = {
        a.artifact_id: "".join(p.text for p in a.parts)
        for a in snapshot.task.artifacts
        if a.name == "text"
    }
    for event in rest:
        if event.HasField("artifact_update") and event.artifact_update.artifact.name == "text":
            update = event.artifact_update
            piece = "".join(p.text for p in update.artifact.parts)
            texts[update.artifact.artifact_id] = (
                texts.get(update.artifact.artifact_id, "") if update.append else ""
            ) + piece
    assert list(texts.values()) == await recorded_texts(server, snapshot.task.context_id)


@pytest.mark.parametrize("binding", BINDINGS)
async def test_the_lossless_extension_carries_the_trace_byte_for_byte(
    a2a_server: Start, binding: str
) -> None:
    server = await a2a_server()
    async with sdk_client(server, binding) as client:
        events = await collect(client.send_message(user_message("hi"), context=LOSSLESS))
        plain = await collect(client.send_message(user_message("hi again")))
        got = await client.get_task(a2a.GetTaskRequest(id=events[0].task.id), context=LOSSLESS)
    carried = lossless_messages(events)
    assert carried, "the extension carried nothing"
    assert not lossless_messages(plain)  # only for a client that asks for it
    session_id = events[0].task.context_id
    info = await server.hub.session_info(session_id)
    assert info.trace_path is not None
    trace = Path(info.trace_path).read_bytes().splitlines()
    # The trace's lines after its session_meta are the carried messages, in
    # order and byte for byte, less the streamed partials a trace leaves out.
    texts = [j.encode() for _, j in carried]
    assert b'"type":"partial_text"' in b"".join(texts)
    whole = [t for t in texts if b'"type":"partial_' not in t]
    assert whole == trace[1:]
    assert len({event_id for event_id, _ in carried}) == len(carried)
    # Each carries the hub's event id, which AgentService's Attach resumes after.
    sub = await server.hub.attach(session_id, carried[0][0])
    try:
        nxt = await sub.next()
        assert nxt is not None and nxt.event_id != carried[0][0]
    finally:
        sub.close()
    # GetTask with the extension returns the same messages as the artifact.
    artifact = next(a for a in got.artifacts if a.artifact_id == extension.ARTIFACT_ID)
    assert len(artifact.parts) == len(carried)
    # And each equals the codec's serialization of the recorded message.
    history = [serialize_message(m) async for m in await server.hub.history(session_id)]
    assert whole == history[1:]


async def test_an_a2a_0_3_client_is_served_on_the_same_endpoint(a2a_server: Start) -> None:
    """Clients of the SDKs before 1.0 (``message/send``, ``kind`` fields) still work."""
    server = await a2a_server()
    url = http_url(server) + "/a2a/jsonrpc"
    message = {
        "messageId": "m",
        "role": "user",
        "kind": "message",
        "parts": [{"kind": "text", "text": "hi"}],
    }
    async with httpx.AsyncClient() as http:
        sent = (
            await http.post(
                url,
                json={
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "message/send",
                    "params": {"message": message},
                },
            )
        ).json()
        task = sent["result"]
        got = (
            await http.post(
                url,
                json={
                    "jsonrpc": "2.0",
                    "id": 2,
                    "method": "tasks/get",
                    "params": {"id": task["id"]},
                },
            )
        ).json()
    assert task["kind"] == "task" and task["status"]["state"] == "completed"
    assert got["result"]["status"]["state"] == "completed"
    texts = [
        "".join(p["text"] for p in a["parts"])
        for a in got["result"]["artifacts"]
        if a["name"] == "text"
    ]
    assert texts == await recorded_texts(server, task["contextId"])
