"""A task outlives its start's place in the replay window (issue 42): with a
window of a few events (``buffer_events``), a run's start leaves it as soon as
the next run goes, yet GetTask, ListTasks (paged, by context, by state),
SubscribeToTask and CancelTask answer for it as they did while it was there,
from the task index and the trace. On both backends (memory, and Redis on a
redis-server of the test's own, so ListTasks sees this test's tasks alone),
through the official SDK's client on every binding. A deleted context's tasks
are gone."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from a2a.types import a2a_pb2 as a2a
from a2a_support import (
    BINDINGS,
    approval,
    artifact_texts,
    sdk_client,
    start_server,
    task_id_of,
    user_message,
)
from redis_server import RedisServer

from omni_grpc.server import OmniServer
from omni_grpc.vocabulary import ApprovalMode

Start = Callable[..., Awaitable[OmniServer]]
# A demo run publishes some fifty events: its start is gone after the next run.
WINDOW = 20


@pytest.fixture(params=["memory", "redis"])
async def server(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[OmniServer]:
    overrides: dict[str, Any] = {"buffer_events": WINDOW, "engine_options": {"pacing": "0.01"}}
    if request.param == "redis":
        redis: RedisServer = request.getfixturevalue("redis")
        overrides["redis_url"] = redis.url
    made = await start_server(tmp_path / "data", **overrides)
    yield made
    await made.stop()


async def collect(stream: AsyncIterator[a2a.StreamResponse]) -> list[a2a.StreamResponse]:
    return [event async for event in stream]


def texts(task: a2a.Task) -> list[str]:
    return ["".join(p.text for p in a.parts) for a in task.artifacts if a.name == "text"]


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_task_is_found_after_its_start_left_the_window(
    server: OmniServer, binding: str
) -> None:
    async with sdk_client(server, binding) as client:
        one = await collect(client.send_message(user_message("one", message_id="client-one")))
        one_id, context = one[0].task.id, one[0].task.context_id
        in_window = await client.get_task(a2a.GetTaskRequest(id=one_id))

        # A second task, canceled under way.
        stream = client.send_message(user_message("two", context_id=context))
        two_id = task_id_of(await anext(stream))
        async for event in stream:
            if event.HasField("artifact_update"):
                break
        await stream.aclose()
        canceled = await client.cancel_task(a2a.CancelTaskRequest(id=two_id))
        assert canceled.status.state == a2a.TASK_STATE_CANCELED

        three = await collect(client.send_message(user_message("three", context_id=context)))
        four = await collect(client.send_message(user_message("four")))
        three_id, four_id = three[0].task.id, four[0].task.id
        # The window holds the newest run's end alone: one's and two's starts are gone.
        window = await server.hub.replay_window(context)
        assert len(window) <= WINDOW
        assert one_id.split(":")[1] not in {e.event_id for e in window}

        got = await client.get_task(a2a.GetTaskRequest(id=one_id))
        gone_two = await client.get_task(a2a.GetTaskRequest(id=two_id))
        by_context = await client.list_tasks(
            a2a.ListTasksRequest(context_id=context, include_artifacts=True)
        )
        pages: list[a2a.ListTasksResponse] = [
            await client.list_tasks(a2a.ListTasksRequest(page_size=1))
        ]
        while pages[-1].next_page_token:
            pages.append(
                await client.list_tasks(
                    a2a.ListTasksRequest(page_size=1, page_token=pages[-1].next_page_token)
                )
            )
        done = await client.list_tasks(a2a.ListTasksRequest(status=a2a.TASK_STATE_COMPLETED))
        stopped = await client.list_tasks(a2a.ListTasksRequest(status=a2a.TASK_STATE_CANCELED))
        working = await client.list_tasks(a2a.ListTasksRequest(status=a2a.TASK_STATE_WORKING))
        with pytest.raises(Exception, match="already ended"):
            await client.cancel_task(a2a.CancelTaskRequest(id=one_id))
        with pytest.raises(Exception, match="has ended"):
            await collect(client.subscribe(a2a.SubscribeToTaskRequest(id=one_id)))

        # What the task was while its start was in the window, it still is.
        assert got.status.state == in_window.status.state == a2a.TASK_STATE_COMPLETED
        assert texts(got) == texts(in_window) == artifact_texts(one, "text")
        assert texts(got) and all(texts(got))
        assert got.history[0].message_id == in_window.history[0].message_id == "client-one"
        assert got.history[0].parts[0].text == "one"
        assert gone_two.status.state == a2a.TASK_STATE_CANCELED
        assert gone_two.status.message.parts[0].text == canceled.status.message.parts[0].text
        assert gone_two.history[0].message_id == "m-two"

        assert [t.id for t in by_context.tasks] == [three_id, two_id, one_id]  # newest first
        assert by_context.total_size == 3 and not by_context.next_page_token
        assert texts(by_context.tasks[2]) == texts(got)
        assert [t.id for p in pages for t in p.tasks] == [four_id, three_id, two_id, one_id]
        assert all(p.total_size == 4 and len(p.tasks) == 1 for p in pages)
        assert {t.id for t in done.tasks} == {one_id, three_id, four_id}
        assert [t.id for t in stopped.tasks] == [two_id]
        assert list(working.tasks) == [] and working.total_size == 0

        await server.hub.delete_session(context)
        left = await client.list_tasks(a2a.ListTasksRequest())
        assert [t.id for t in left.tasks] == [four_id]
        with pytest.raises(Exception, match="no task"):
            await client.get_task(a2a.GetTaskRequest(id=one_id))


@pytest.fixture(params=["memory", "redis"])
async def asking_server(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[OmniServer]:
    # A window of a few events: a run waiting for a decision has published more.
    overrides: dict[str, Any] = {"buffer_events": 4, "approval_mode": ApprovalMode.ASK}
    if request.param == "redis":
        redis: RedisServer = request.getfixturevalue("redis")
        overrides["redis_url"] = redis.url
    made = await start_server(tmp_path / "data", **overrides)
    yield made
    await made.stop()


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_waiting_task_is_found_after_its_start_left_the_window(
    asking_server: OmniServer, binding: str
) -> None:
    async with sdk_client(asking_server, binding) as client:
        asked = await collect(
            client.send_message(user_message("list my files", message_id="ask-1"))
        )
        assert asked[-1].status_update.status.state == a2a.TASK_STATE_INPUT_REQUIRED
        task_id, context = task_id_of(asked[0]), asked[0].task.context_id
        window = await asking_server.hub.replay_window(context)
        assert task_id.split(":")[1] not in {e.event_id for e in window}
        got = await client.get_task(a2a.GetTaskRequest(id=task_id))
        waiting = await client.list_tasks(
            a2a.ListTasksRequest(status=a2a.TASK_STATE_INPUT_REQUIRED)
        )
    assert got.status.state == a2a.TASK_STATE_INPUT_REQUIRED
    assert got.history[0].message_id == "ask-1"
    assert got.history[0].parts[0].text == "list my files"
    # The tool call it waits on is in its history, as the stream told it.
    calls = [
        p.data.struct_value["toolCall"]
        for m in got.history
        for p in m.parts
        if p.HasField("data") and "toolCall" in p.data.struct_value
    ]
    assert len(calls) == 1
    assert [t.id for t in waiting.tasks] == [task_id]


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_waiting_task_is_answered_and_followed_after_its_start_left_the_window(
    asking_server: OmniServer, binding: str
) -> None:
    """A task waiting for a decision publishes nothing until it gets one: its
    record and trace, then the live stream, tell it without a gap."""
    async with sdk_client(asking_server, binding) as client:
        asked = await collect(client.send_message(user_message("list my files")))
        task_id, context = task_id_of(asked[0]), asked[0].task.context_id
        window = await asking_server.hub.replay_window(context)
        assert task_id.split(":")[1] not in {e.event_id for e in window}
        followed = client.subscribe(a2a.SubscribeToTaskRequest(id=task_id))
        snapshot = await anext(followed)
        assert snapshot.task.id == task_id
        assert snapshot.task.status.state == a2a.TASK_STATE_INPUT_REQUIRED
        # The answer names no call: the one the task waits on is known.
        answered = await collect(client.send_message(approval(task_id, "allow")))
        rest = await collect(followed)
        again = await collect(
            client.send_message(user_message("list my files", context_id=context))
        )
        canceled = await client.cancel_task(a2a.CancelTaskRequest(id=task_id_of(again[0])))
    assert answered[0].task.id == task_id
    assert answered[-1].status_update.status.state == a2a.TASK_STATE_COMPLETED
    states = [e.status_update.status.state for e in rest if e.HasField("status_update")]
    assert states[-1] == a2a.TASK_STATE_COMPLETED
    assert a2a.TASK_STATE_WORKING in states
    assert texts_of(rest) == texts_of(answered)  # the same answer, once
    decisions = [
        m.approval_decision
        async for m in await asking_server.hub.history(context)
        if m.HasField("approval_decision")
    ]
    assert decisions[0].decision == 1  # DECISION_ALLOW, for the first task
    assert canceled.status.state == a2a.TASK_STATE_CANCELED


def texts_of(events: list[a2a.StreamResponse]) -> list[str]:
    return [
        "".join(p.text for p in e.artifact_update.artifact.parts)
        for e in events
        if e.HasField("artifact_update") and e.artifact_update.artifact.name == "text"
    ]


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_running_task_is_canceled_after_its_start_left_the_window(
    server: OmniServer, binding: str
) -> None:
    async with sdk_client(server, binding) as client:
        stream = client.send_message(user_message("hi " * 200))
        first = await anext(stream)
        task_id, context = task_id_of(first), first.task.context_id
        async for _ in stream:  # until its start has left the window
            window = await server.hub.replay_window(context)
            if task_id.split(":")[1] not in {e.event_id for e in window}:
                break
        await stream.aclose()
        record = await server.hub.task_record(context, task_id.split(":")[1])
        assert record is not None and record.state == "working"
        canceled = await client.cancel_task(a2a.CancelTaskRequest(id=task_id))
        got = await client.get_task(a2a.GetTaskRequest(id=task_id))
    assert canceled.id == task_id
    assert canceled.status.state == got.status.state == a2a.TASK_STATE_CANCELED
