"""The hub with real engines: order, ids, trace, approvals, abort, restore.

Every test runs on both backends (memory, and Redis on a real redis-server),
except the few about the memory log itself."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from omni_grpc import protocol
from omni_grpc.convert import message_from_dict, serialize_message
from omni_grpc.engines.base import JsonObject, RunOptions
from omni_grpc.engines.demo import DemoEngine
from omni_grpc.runtime import (
    ApprovalMode,
    HubClosed,
    InvalidRequest,
    SessionBusy,
    SessionNotFound,
    bodies,
)
from omni_grpc.runtime.backend import Backend, memory_backend
from omni_grpc.runtime.bodies import is_task_end
from omni_grpc.runtime.errors import TooManyStreams
from omni_grpc.runtime.event_log import Subscription
from omni_grpc.runtime.events import HubEvent
from omni_grpc.runtime.fanout import Subscriber
from omni_grpc.runtime.hub import Hub, RunRequest
from omni_grpc.runtime.limits import Limits
from omni_grpc.runtime.memory_log import MemoryEventLog

MakeBackend = Callable[..., Backend]


def prompt(text: str = "hi", **kw: object) -> RunRequest:
    return RunRequest(input=[message_from_dict(protocol.user_text(text))], **kw)  # type: ignore[arg-type]


async def until_end(sub: Subscription, timeout: float = 5) -> list[HubEvent]:
    out: list[HubEvent] = []

    async def read() -> None:
        async for event in sub:
            out.append(event)
            if is_task_end(event):
                return

    await asyncio.wait_for(read(), timeout)
    return out


def label(event: HubEvent) -> str:
    data = orjson.loads(event.data)
    if event.server_event is not None:
        return f"@{data['type']}" + (f":{data['state']}" if "state" in data else "")
    return str(data["payload"].get("type", "session_meta"))


async def trace_of(hub: Hub, session_id: str) -> Path:
    record = await hub.backend.index.get(session_id)
    assert record is not None
    return hub.traces.paths(record)[-1]


def trace_lines(path: Path) -> list[JsonObject]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


async def test_a_task_publishes_input_running_engine_messages_idle(
    tmp_path: Path, make_backend: MakeBackend
) -> None:
    hub = Hub(DemoEngine(), tmp_path, backend=make_backend())
    session_id, sub = await hub.run(prompt("hello"))
    events = await until_end(sub)
    labels = [label(e) for e in events]
    assert labels[:3] == ["text", "@task_state:running", "tool_list_ready"]
    assert labels[-1] == "@task_state:idle"
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert all(e.event_id.endswith(f"-{e.seq}") for e in events)
    # The JSON every transport sends is the codec's, computed once.
    for e in events:
        if e.message is not None:
            assert e.data == serialize_message(e.message)
    # The trace: session_meta, the input, then everything recordable, in order.
    lines = trace_lines(await trace_of(hub, session_id))
    assert lines[0]["type"] == "session_meta" and lines[0]["payload"]["session_id"] == session_id
    recordable = [
        orjson.loads(e.data)
        for e in events
        if e.message is not None
        and not orjson.loads(e.data)["payload"]["type"].startswith("partial_")
    ]
    assert lines[1:] == recordable
    history = [serialize_message(m) async for m in await hub.history(session_id)]
    assert [orjson.loads(h) for h in history] == lines
    info = await hub.session_info(session_id)
    assert info.state == "idle" and info.message_count == len(lines)
    assert info.last_event_id == events[-1].event_id


async def test_second_run_appends_without_a_second_session_meta(
    tmp_path: Path, make_backend: MakeBackend
) -> None:
    hub = Hub(DemoEngine(), tmp_path, backend=make_backend())
    session_id, sub = await hub.run(prompt("one"))
    await until_end(sub)
    again, sub = await hub.run(prompt("two", session_id=session_id))
    assert again == session_id
    await until_end(sub)
    lines = trace_lines(await trace_of(hub, session_id))
    assert sum(1 for line in lines if line["type"] == "session_meta") == 1
    assert [
        line["payload"].get("text")
        for line in lines
        if line["payload"].get("role") == "user" and line["payload"]["type"] == "text"
    ] == ["one", "two"]


async def test_busy_unknown_and_bad_requests_are_refused(
    tmp_path: Path, make_backend: MakeBackend
) -> None:
    hub = Hub(DemoEngine(pacing=0.05), tmp_path, backend=make_backend())
    session_id, sub = await hub.run(prompt())
    with pytest.raises(SessionBusy):
        await hub.run(prompt(session_id=session_id))
    with pytest.raises(SessionNotFound):
        await hub.run(prompt(session_id="session-nope"))
    with pytest.raises(InvalidRequest) as bad:
        await hub.run(prompt(session_id="../etc"))
    assert bad.value.field == "session_id"
    with pytest.raises(InvalidRequest) as bad:
        await hub.run(RunRequest(input=[]))
    assert bad.value.field == "input"
    partial = message_from_dict(protocol.partial_text("start"))
    with pytest.raises(InvalidRequest) as bad:
        await hub.run(RunRequest(input=[message_from_dict(protocol.user_text("x")), partial]))
    assert bad.value.field == "input[1].payload"
    assert await hub.abort(session_id)
    events = await until_end(sub)
    assert label(events[-2]) == "abort"
    assert not await hub.abort(session_id)  # idle now


async def test_abort_mid_stream_records_a_closed_turn(
    tmp_path: Path, make_backend: MakeBackend
) -> None:
    hub = Hub(DemoEngine(pacing=0.01), tmp_path, backend=make_backend())
    session_id, sub = await hub.run(prompt())
    seen: list[HubEvent] = []
    async for event in sub:
        seen.append(event)
        if label(event) == "partial_text":
            await hub.abort(session_id, "enough")
        if is_task_end(event):
            break
    labels = [label(e) for e in seen]
    assert labels[-2:] == ["abort", "@task_state:idle"]
    assert orjson.loads(seen[-2].data)["payload"]["reason"] == "enough"
    lines = trace_lines(await trace_of(hub, session_id))
    kinds = [line["payload"].get("type") for line in lines]
    assert kinds[-1] == "abort"
    assert kinds.count("request_begin") == kinds.count("request_end")


async def test_ask_mode_waits_for_approve_and_replays_pending_to_attachers(
    tmp_path: Path, make_backend: MakeBackend
) -> None:
    hub = Hub(DemoEngine(), tmp_path, backend=make_backend())
    session_id, sub = await hub.run(prompt(approval_mode=ApprovalMode.ASK))
    request = None
    async for event in sub:
        if label(event) == "@approval_request":
            request = event
            break
    assert request is not None
    tool_call_id = orjson.loads(request.data)["toolCall"]["payload"]["tool_call_id"]
    # A late attacher gets the task state and the pending ask, unicast.
    late = await hub.attach(session_id, None)
    first, second = await late.next(), await late.next()
    assert first is not None and second is not None
    assert label(first) == "@task_state:running" and not first.buffered
    assert second.data == request.data and not second.buffered
    with pytest.raises(Exception, match="no pending approval"):
        await hub.approve(session_id, "call_other", "allow")
    await hub.approve(session_id, tool_call_id, "deny")
    events = await until_end(sub)
    decisions = [orjson.loads(e.data)["payload"] for e in events if label(e) == "approval_decision"]
    assert decisions == [
        {"type": "approval_decision", "decision": "deny", "tool_call_id": tool_call_id}
    ]


async def test_abort_ends_a_pending_ask_without_a_decision(
    tmp_path: Path, make_backend: MakeBackend
) -> None:
    hub = Hub(DemoEngine(), tmp_path, backend=make_backend())
    session_id, sub = await hub.run(prompt(approval_mode=ApprovalMode.ASK))
    async for event in sub:
        if label(event) == "@approval_request":
            break
    await hub.abort(session_id)
    labels = [label(e) for e in await until_end(sub)]
    # Nobody decided: the call's output (not run: aborted), no approval_decision.
    assert "approval_decision" not in labels
    assert labels[-4:] == [
        "tool_call_output",
        "request_end",
        "abort",
        "@task_state:idle",
    ]


@pytest.mark.parametrize(
    ("mode", "decision"), [(ApprovalMode.DENY_ALL, "deny"), (ApprovalMode.READ_ONLY, "allow")]
)
async def test_policy_modes(
    tmp_path: Path, make_backend: MakeBackend, mode: ApprovalMode, decision: str
) -> None:
    hub = Hub(DemoEngine(), tmp_path, backend=make_backend(), default_approval=mode)
    _, sub = await hub.run(prompt())
    events = await until_end(sub)
    [found] = [
        orjson.loads(e.data)["payload"]["decision"]
        for e in events
        if label(e) == "approval_decision"
    ]
    assert found == decision


async def test_attach_replays_the_gap_after_an_id(
    tmp_path: Path, make_backend: MakeBackend
) -> None:
    hub = Hub(DemoEngine(), tmp_path, backend=make_backend())
    session_id, sub = await hub.run(prompt())
    events = await until_end(sub)
    resumed = await hub.attach(session_id, events[9].event_id)
    replay = [await resumed.next() for _ in range(len(events) - 10)]
    assert [e.event_id for e in replay if e] == [e.event_id for e in events[10:]]
    state = await resumed.next()
    assert state is not None and label(state) == "@task_state:idle" and not state.buffered


class Crashing:
    async def run(self, input: list[JsonObject], options: RunOptions) -> AsyncIterator[JsonObject]:
        yield protocol.request_begin()
        yield protocol.partial_text("start")
        yield protocol.partial_text("delta", "half a sen")
        raise RuntimeError("model exploded")


class Stubborn:
    async def run(self, input: list[JsonObject], options: RunOptions) -> AsyncIterator[JsonObject]:
        yield protocol.request_begin()
        await asyncio.sleep(3600)  # ignores the abort
        yield protocol.request_end("completed")


class Garbage:
    async def run(self, input: list[JsonObject], options: RunOptions) -> AsyncIterator[JsonObject]:
        yield {"timestamp": "t", "type": "model_msg", "payload": {"type": "text", "role": {}}}


async def test_an_engine_crash_becomes_messages(tmp_path: Path, make_backend: MakeBackend) -> None:
    hub = Hub(Crashing(), tmp_path, backend=make_backend())  # type: ignore[arg-type]
    session_id, sub = await hub.run(prompt())
    events = await until_end(sub)
    tail = [orjson.loads(e.data)["payload"] for e in events[-6:-1]]
    assert [p["type"] for p in tail] == [
        "partial_text",
        "partial_text",
        "text",
        "request_end",
        "abort",
    ]
    assert tail[1]["event_type"] == "stop" and tail[1]["stop_reason"] == "failed"
    assert tail[2]["text"] == "half a sen" and tail[2]["stop_reason"] == "failed"
    assert tail[3]["status"] == "failed" and "model exploded" in tail[3]["error_message"]
    assert "model exploded" in tail[4]["reason"]
    kinds = [line["payload"].get("type") for line in trace_lines(await trace_of(hub, session_id))]
    assert kinds[-3:] == ["text", "request_end", "abort"]


async def test_an_engine_ignoring_abort_is_stopped_after_the_grace(
    tmp_path: Path, make_backend: MakeBackend
) -> None:
    hub = Hub(Stubborn(), tmp_path, backend=make_backend(), abort_grace=0.1)  # type: ignore[arg-type]
    session_id, sub = await hub.run(prompt())
    first = [await sub.next() for _ in range(3)]
    assert label(first[2]) == "request_begin"  # type: ignore[arg-type]
    await hub.abort(session_id, "stop")
    tail = [orjson.loads(e.data)["payload"] for e in (await until_end(sub))[-3:-1]]
    assert tail == [
        {"type": "request_end", "status": "aborted", "error_message": "engine ignored the abort"},
        {"type": "abort", "reason": "stop"},
    ]


async def test_an_invalid_engine_message_is_reported_not_raised(
    tmp_path: Path, make_backend: MakeBackend
) -> None:
    hub = Hub(Garbage(), tmp_path, backend=make_backend())  # type: ignore[arg-type]
    _, sub = await hub.run(prompt())
    last = orjson.loads((await until_end(sub))[-2].data)["payload"]
    assert last["type"] == "abort" and "invalid message" in last["reason"]


async def test_sessions_survive_a_restart(
    tmp_path: Path, make_backend: MakeBackend, backend_kind: str
) -> None:
    hub = Hub(DemoEngine(), tmp_path, backend=make_backend())
    session_id, sub = await hub.run(prompt("remember me"))
    last = (await until_end(sub))[-1].event_id
    before = [serialize_message(m) async for m in await hub.history(session_id)]
    await hub.shutdown()

    reborn = Hub(DemoEngine(), tmp_path, backend=make_backend())
    [info] = await reborn.list_sessions()
    assert info.session_id == session_id and info.state == "idle"
    assert info.message_count == len(before)
    # The memory log died with the process; Redis kept it, ids and all.
    assert info.last_event_id == (None if backend_kind == "memory" else last)
    assert [serialize_message(m) async for m in await reborn.history(session_id)] == before
    # It can run again, appending to the same trace without a second meta.
    _, sub = await reborn.run(prompt("again", session_id=session_id))
    await until_end(sub)
    lines = trace_lines(await trace_of(reborn, session_id))
    assert sum(1 for line in lines if line["type"] == "session_meta") == 1


async def test_shutdown_records_the_abort_of_running_tasks(
    tmp_path: Path, make_backend: MakeBackend
) -> None:
    hub = Hub(DemoEngine(pacing=0.05), tmp_path, backend=make_backend())
    session_id, sub = await hub.run(prompt())
    await sub.next()
    await hub.shutdown("server shutting down")
    lines = trace_lines(await trace_of(hub, session_id))
    assert lines[-1]["payload"] == {"type": "abort", "reason": "server shutting down"}
    with pytest.raises(HubClosed):
        await hub.run(prompt())


async def test_idle_unwatched_logs_are_reclaimed_and_old_ids_then_resync(tmp_path: Path) -> None:
    hub = Hub(DemoEngine(), tmp_path, backend=memory_backend(idle_ttl=0))
    session_id, sub = await hub.run(prompt())
    events = await until_end(sub)
    watcher = await hub.attach(session_id, None)
    # Watched: kept, so an old id still replays.
    same = await hub.attach(session_id, events[-3].event_id)
    assert (await same.next()).event_id == events[-2].event_id  # type: ignore[union-attr]
    watcher.close()
    same.close()
    sub.close()
    assert hub.backend.logs.reclaim_idle() == 1
    fresh = await hub.attach(session_id, events[-3].event_id)
    first = await fresh.next()
    assert first is not None and label(first) == "@resync_required"
    assert not first.event_id.startswith(events[0].event_id.rsplit("-", 1)[0])


class AwaitingLog(MemoryEventLog):
    """A log whose subscribe yields to the loop first, as a networked one does."""

    async def subscribe(self, *args: Any, **kwargs: Any) -> Subscriber:
        await asyncio.sleep(0)
        return await super().subscribe(*args, **kwargs)


async def test_concurrent_runs_start_one_task_even_when_subscribe_awaits(tmp_path: Path) -> None:
    hub = Hub(
        DemoEngine(pacing=0.01),
        tmp_path,
        log_factory=lambda _sid: AwaitingLog(bodies.resync_required_body()),
    )
    session_id = (await hub.create_session()).session_id
    results = await asyncio.gather(
        *(hub.run(prompt(session_id=session_id)) for _ in range(5)), return_exceptions=True
    )
    started = [r for r in results if not isinstance(r, BaseException)]
    refused = [r for r in results if isinstance(r, BaseException)]
    assert len(started) == 1
    assert len(refused) == 4 and all(isinstance(r, SessionBusy) for r in refused)
    events = await until_end(started[0][1])  # type: ignore[index]
    assert sum(1 for e in events if label(e) == "@task_state:running") == 1


async def test_streams_past_the_operators_limit_are_refused(
    tmp_path: Path, make_backend: MakeBackend
) -> None:
    hub = Hub(
        DemoEngine(),
        tmp_path,
        backend=make_backend(),
        limits=Limits(max_streams_per_session=2),
    )
    session_id, sub = await hub.run(prompt())
    await until_end(sub)
    sub.close()
    first = await hub.attach(session_id, None)
    second = await hub.attach(session_id, None)
    with pytest.raises(TooManyStreams) as refused:
        await hub.attach(session_id, None)
    assert (refused.value.limit, refused.value.value) == ("max_streams_per_session", 2)
    with pytest.raises(TooManyStreams):
        await hub.run(prompt(session_id=session_id))
    first.close()
    again = await hub.attach(session_id, None)  # room again once one closed
    again.close()
    second.close()
