"""The hub keeps every run in the task index (``runtime/task_ledger.py``), on
both backends (memory, and Redis on a real redis-server): a run is found by its
first event's id with its state as it changes (working, waiting for a decision,
and how it ended), its client's message id, and its place in the trace (the
records from ``first_record`` to ``last_record`` are the run's, exactly); a
deleted session's runs are gone."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from test_runtime_hub import label, prompt, until_end

from omni_grpc.engines.demo import DemoEngine
from omni_grpc.runtime import ApprovalMode
from omni_grpc.runtime.backend import Backend
from omni_grpc.runtime.event_log import Subscription
from omni_grpc.runtime.events import HubEvent
from omni_grpc.runtime.hub import Hub
from omni_grpc.runtime.task_index import TaskRecord
from omni_grpc.vocabulary import TaskStatus

MakeBackend = Callable[..., Backend]


async def record_of(hub: Hub, session_id: str, first: HubEvent) -> TaskRecord:
    found = await hub.task_record(session_id, first.event_id)
    assert found is not None
    return found


async def first_and_rest(sub: Subscription) -> tuple[HubEvent, list[HubEvent]]:
    events = await until_end(sub)
    return events[0], events


async def test_runs_are_kept_with_their_place_in_the_trace(
    tmp_path: Path, make_backend: MakeBackend
) -> None:
    hub = Hub(DemoEngine(), tmp_path, backend=make_backend())
    session_id, sub = await hub.run(prompt("one", message_id="client-1"))
    first, events = await first_and_rest(sub)
    one = await record_of(hub, session_id, first)
    _, sub = await hub.run(prompt("two", session_id=session_id))
    second, _ = await first_and_rest(sub)
    two = await record_of(hub, session_id, second)

    assert (one.state, one.message_id, one.reason) == (TaskStatus.COMPLETED, "client-1", None)
    # The last message before the end (written before the end is out).
    assert one.last_event_id == events[-2].event_id
    assert two.message_id is None
    records = [m async for m in await hub.history(session_id)]
    # Record 1 is the session_meta; each run's records are its own, end to end.
    assert records[0].WhichOneof("payload") == "session_meta"
    assert one.first_record == 2 and two.first_record == one.last_record + 1  # type: ignore[operator]
    assert two.last_record == len(records)
    for rec, text in ((one, "one"), (two, "two")):
        assert rec.first_record is not None and rec.last_record is not None
        mine = records[rec.first_record - 1 : rec.last_record]
        assert mine[0].text.text == text
        assert mine[-1].WhichOneof("payload") == "request_end"

    page, total = await hub.task_records(session_id=session_id)
    assert total == 2 and [r.event_id for r in page] == [second.event_id, first.event_id]
    await hub.delete_session(session_id)
    assert await hub.task_record(session_id, first.event_id) is None
    assert await hub.task_records(session_id=session_id) == ([], 0)
    assert await hub.task_records() == ([], 0)
    await hub.shutdown()


async def test_waiting_for_a_decision_and_a_cancel_are_states(
    tmp_path: Path, make_backend: MakeBackend
) -> None:
    hub = Hub(DemoEngine(), tmp_path, backend=make_backend())
    session_id, sub = await hub.run(prompt(approval_mode=ApprovalMode.ASK))
    first = None
    async for event in sub:
        first = first or event
        if label(event) == "@approval_request":
            break
    assert first is not None
    waiting = await record_of(hub, session_id, first)
    assert waiting.state == TaskStatus.INPUT_REQUIRED
    await hub.abort(session_id, "enough")
    await until_end(sub)
    ended = await record_of(hub, session_id, first)
    assert (ended.state, ended.reason) == (TaskStatus.CANCELED, "enough")
    page, total = await hub.task_records(state=TaskStatus.CANCELED)
    assert total == 1 and page == [ended]
    assert await hub.task_records(state=TaskStatus.INPUT_REQUIRED) == ([], 0)
    await hub.shutdown()


@pytest.mark.parametrize("decision", ["allow", "deny"])
async def test_a_decision_puts_the_run_back_to_work(
    tmp_path: Path, make_backend: MakeBackend, decision: str
) -> None:
    hub = Hub(DemoEngine(), tmp_path, backend=make_backend())
    session_id, sub = await hub.run(prompt(approval_mode=ApprovalMode.ASK))
    first = None
    async for event in sub:
        first = first or event
        if label(event) == "@approval_request":
            call_id = event.server_event.approval_request.tool_call.tool_call.tool_call_id  # type: ignore[union-attr]
            await hub.approve(session_id, call_id, decision)
        if label(event) == "approval_decision":
            break
    assert first is not None
    # The decision is recorded before it is published: the run is working again.
    assert (await record_of(hub, session_id, first)).state == TaskStatus.WORKING
    await until_end(sub)
    assert (await record_of(hub, session_id, first)).state == TaskStatus.COMPLETED
    await hub.shutdown()
