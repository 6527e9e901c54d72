"""The same runs seen over A2A and over AgentService agree, event for event and
byte for byte; and on Redis replicas a task is followed from any of them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from a2a.types import a2a_pb2 as a2a
from a2a_support import (
    LOSSLESS,
    approval,
    lossless_messages,
    sdk_client,
    start_server,
    state_of,
    task_id_of,
    user_message,
)

from omni_grpc.client.agent_client import AgentClient
from omni_grpc.runtime.backend import Backend
from omni_grpc.vocabulary import ApprovalMode
from omni_grpc_proto.omni.v1 import agent_service_pb2 as pb


@pytest.mark.parametrize("binding", ["JSONRPC", "GRPC"])
async def test_a_run_started_on_agent_service_reads_the_same_over_a2a(
    tmp_path: Path, binding: str
) -> None:
    server = await start_server(tmp_path / "data")
    try:
        assert server.grpc is not None
        async with AgentClient(server.grpc.address) as agent:
            events = [e async for e in agent.run("hi", include_json=True)]
        session_id = events[0].session_id
        messages = [(e.event_id, e.json) for e in events if e.message is not None]
        task_id = f"{session_id}:{events[0].event_id}"
        async with sdk_client(server, binding) as client:
            task = await client.get_task(a2a.GetTaskRequest(id=task_id), context=LOSSLESS)
            listed = await client.list_tasks(a2a.ListTasksRequest(context_id=session_id))
        assert task.status.state == a2a.TASK_STATE_COMPLETED
        assert [t.id for t in listed.tasks] == [task_id]
        carried = lossless_messages([a2a.StreamResponse(task=task)])
        assert carried == messages
    finally:
        await server.stop()


@pytest.mark.parametrize("binding", ["JSONRPC", "GRPC"])
async def test_a_task_started_over_a2a_attaches_the_same_on_agent_service(
    tmp_path: Path, binding: str
) -> None:
    server = await start_server(tmp_path / "data", approval_mode=ApprovalMode.ASK)
    try:
        assert server.grpc is not None
        async with sdk_client(server, binding) as client:
            seen: list[a2a.StreamResponse] = []
            async for event in client.send_message(user_message("list"), context=LOSSLESS):
                seen.append(event)
                if state_of(event) == a2a.TASK_STATE_INPUT_REQUIRED:
                    break
            task_id = task_id_of(seen[0])
            session_id, _, first = task_id.partition(":")
            epoch, _, seq = first.rpartition("-")
            async with AgentClient(server.grpc.address) as agent:
                attached = agent.attach(session_id, f"{epoch}-{int(seq) - 1}", include_json=True)
                resumed = [
                    e
                    async for e in client.send_message(approval(task_id, "allow"), context=LOSSLESS)
                ]
                over_grpc = []
                async for event in attached:
                    over_grpc.append(event)
                    state = event.server_event.task_state if event.server_event else None
                    if state is not None and state.state == pb.SESSION_STATE_IDLE:
                        break  # the task's end (the replay starts at its first event)
        assert state_of(resumed[-1]) == a2a.TASK_STATE_COMPLETED
        over_a2a = lossless_messages(resumed)  # the snapshot holds all before the answer
        grpc_messages = [(e.event_id, e.json) for e in over_grpc if e.message is not None]
        assert over_a2a == grpc_messages
        assert lossless_messages(seen) == grpc_messages[: len(lossless_messages(seen))]
    finally:
        await server.stop()


@pytest.mark.parametrize("backend_kind", ["redis"])
@pytest.mark.parametrize("binding", ["JSONRPC", "GRPC"])
async def test_subscribe_to_task_on_another_replica_resumes_the_same_task(
    tmp_path: Path, make_backend: Callable[..., Backend], binding: str
) -> None:
    shared = tmp_path / "shared-data"
    one = await start_server(shared, backend=make_backend(), approval_mode=ApprovalMode.ASK)
    two = await start_server(shared, backend=make_backend(), approval_mode=ApprovalMode.ASK)
    try:
        async with sdk_client(one, binding) as client:
            seen: list[a2a.StreamResponse] = []
            async for event in client.send_message(user_message("list"), context=LOSSLESS):
                seen.append(event)
                if state_of(event) == a2a.TASK_STATE_INPUT_REQUIRED:
                    break  # replica one's client goes away; its task waits on replica one
        task_id = task_id_of(seen[0])
        async with sdk_client(two, binding) as client:
            stream = client.subscribe(a2a.SubscribeToTaskRequest(id=task_id), context=LOSSLESS)
            snapshot = await anext(stream)
            assert snapshot.task.id == task_id
            assert snapshot.task.status.state == a2a.TASK_STATE_INPUT_REQUIRED
            assert lossless_messages([snapshot]) == lossless_messages(seen)
            answer = [e async for e in client.send_message(approval(task_id, "allow"))]
            rest = [e async for e in stream]
            got = await client.get_task(a2a.GetTaskRequest(id=task_id), context=LOSSLESS)
        assert state_of(answer[-1]) == a2a.TASK_STATE_COMPLETED
        assert state_of(rest[-1]) == a2a.TASK_STATE_COMPLETED
        whole = lossless_messages([snapshot, *rest])
        assert whole == lossless_messages([a2a.StreamResponse(task=got)])
        history = [m async for m in await one.hub.history(snapshot.task.context_id)]
        assert any(m.HasField("approval_decision") for m in history)
    finally:
        await two.stop()
        await one.stop()
