"""Approve for a run in this process resolves it here, without the control
channel; and a trace store keeps a bounded number of shard writers."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
import pytest

from omni_grpc import protocol
from omni_grpc.convert import message_from_dict, message_to_dict, serialize_message
from omni_grpc.engines.demo import DemoEngine
from omni_grpc.runtime.approvals import ApprovalMode
from omni_grpc.runtime.backend import Backend
from omni_grpc.runtime.bodies import is_task_end
from omni_grpc.runtime.errors import ApprovalNotPending
from omni_grpc.runtime.hub import Hub, RunRequest
from omni_grpc.runtime.session_index import SessionRecord
from omni_grpc.runtime.trace_store import TraceStore
from omni_grpc.trace import read_jsonl


async def test_approve_of_a_local_run_does_not_go_round_the_control_channel(
    tmp_path: Path, make_backend: Any
) -> None:
    backend: Backend = make_backend()
    hub = Hub(DemoEngine(), tmp_path, backend=backend)
    sent: list[object] = []
    real_send = backend.control.send

    async def counting_send(replica: str, command: Any) -> None:
        sent.append(command)
        await real_send(replica, command)

    backend.control.send = counting_send  # type: ignore[method-assign]
    request = RunRequest(
        input=[message_from_dict(protocol.user_text("hi"))], approval_mode=ApprovalMode.ASK
    )
    session_id, sub = await hub.run(request)
    ask = None
    async for event in sub:
        if event.server_event is not None and event.server_event.HasField("approval_request"):
            ask = orjson.loads(event.data)
            break
    assert ask is not None
    tool_call_id = ask["toolCall"]["payload"]["tool_call_id"]
    with pytest.raises(ApprovalNotPending):
        await hub.approve(session_id, "call_other", "allow")
    await hub.approve(session_id, tool_call_id, "allow")
    with pytest.raises(ApprovalNotPending):  # taken: a second Approve finds nothing
        await hub.approve(session_id, tool_call_id, "deny")

    async def rest() -> list[Any]:
        out = []
        async for event in sub:
            out.append(event)
            if is_task_end(event):
                return out
        return out

    events = await asyncio.wait_for(rest(), 30)
    decisions = [
        orjson.loads(e.data)["payload"]
        for e in events
        if e.message is not None and e.message.HasField("approval_decision")
    ]
    assert decisions == [
        {"type": "approval_decision", "decision": "allow", "tool_call_id": tool_call_id}
    ]
    assert sent == []  # resolved in this process
    await hub.shutdown()


def test_the_trace_store_keeps_a_bounded_number_of_writers(tmp_path: Path) -> None:
    store = TraceStore(tmp_path, max_writers=2)
    records = []
    for n in range(5):
        session_id = f"session-{n}"
        record = SessionRecord(session_id, "t", "t", 0, (store.new_shard(session_id),))
        records.append(record)
        msg = message_from_dict(protocol.user_text(f"first {n}"))
        store.append(record, msg, serialize_message(msg))
        assert store.cached_writers <= 2
    # A writer dropped from the cache re-reads its shard's tail and appends after it.
    second = message_from_dict(protocol.user_text("second"))
    for record in records:
        store.append(record, second, serialize_message(second))
        assert store.cached_writers <= 2
    for n, record in enumerate(records):
        [shard] = store.paths(record)
        texts = [message_to_dict(r.message)["payload"]["text"] for r in read_jsonl(shard)]
        assert texts == [f"first {n}", "second"]
