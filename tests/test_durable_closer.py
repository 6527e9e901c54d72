"""Closing an orphaned run answers only the calls the TRACE left open (#25).

The owner writes each record to the trace first and publishes it to the log
after; an owner killed (or a Redis that failed) between the two leaves a
trace ahead of the log, for example holding a tool call's output the log
never got. The closer used to take the calls still owed an output from the
log plus the trace's tail past the log's last record; when that tail could
not be lined up (the log's last record's bytes recur later in the trace),
it answered a call the trace had already answered: ``second
tool_call_output for 'call_demo_1'`` in the chaos soak. Here the state is
built directly on a real redis-server, then closed, for each way the trace
can run ahead of the log after the output. The close also publishes what
the trace holds past the log (the records numbered past the log's last
number, #41), so the log's records end up the trace's, even where the log's
last record's bytes recur past it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from omni_grpc import protocol as p
from omni_grpc.convert import message_from_dict, serialize_message
from omni_grpc.engines.base import AbortSignal
from omni_grpc.engines.demo import DemoEngine
from omni_grpc.runtime import bodies
from omni_grpc.runtime.approvals import ApprovalBroker
from omni_grpc.runtime.backend import Backend
from omni_grpc.runtime.health import HealthState
from omni_grpc.runtime.recorder import Recorder
from omni_grpc.runtime.recovery import Recovery
from omni_grpc.runtime.run import Run
from omni_grpc.runtime.session_index import SessionRecord
from omni_grpc.runtime.task_index import TaskRecord
from omni_grpc.runtime.trace_store import TraceStore
from omni_grpc.trace import read_jsonl
from omni_grpc.trace.validate import validate_records
from omni_grpc.vocabulary import SessionState, TaskStatus

WAIT = 120.0  # bounds a hang only
STAMP = "2026-12-05T09:00:00.000Z"  # one millisecond: equal records are equal bytes
CALL = "call_demo_1"

Json = dict[str, Any]


def output() -> Json:
    return p.tool_call_output("ok", CALL, timestamp=STAMP)


def turn() -> list[Json]:
    return [
        p.request_begin(timestamp=STAMP),
        p.assistant_text("done", timestamp=STAMP),
        p.request_end("completed", timestamp=STAMP),
    ]


# What the trace holds past the log's last record (a request_end), the call's
# output first: only the output (the owner died right after writing it), or
# more of the run (the log fell behind while Redis failed), which repeats the
# log's last record's bytes.
AHEAD = {
    "the output only": [output()],
    "the output, then a turn": [output(), *turn()],
    "the output, then two turns": [output(), *turn(), *turn()],
}


@pytest.mark.parametrize("backend_kind", ["redis"])
@pytest.mark.parametrize("ahead", list(AHEAD), ids=list(AHEAD))
async def test_the_closer_never_answers_a_call_the_trace_answered(
    make_backend: Callable[..., Backend], tmp_path: Path, ahead: str
) -> None:
    backend = make_backend(owner_loss_timeout=0.5)
    data = tmp_path / "data"
    store = TraceStore(data)
    session_id = "session-2026-12-05-09-00-00-0000c105"
    record = SessionRecord(session_id, STAMP, STAMP, 0, (store.new_shard(session_id),))
    assert await backend.index.add(record)
    lease = await backend.leases.acquire(session_id, "owner")
    assert lease is not None
    event_log = backend.logs.get(session_id)
    # Valid by the owner's own clock for as long as it writes: what it wrote
    # is the setup, and on a loaded machine its appends (on the recorder's
    # threads) can outlast a lease of 0.375 s; Redis's lease still runs out.
    owner_lease = dataclasses.replace(lease, valid_until=math.inf)
    owner = Run(record, owner_lease, event_log, AbortSignal(), ApprovalBroker(session_id))
    recorder = Recorder(DemoEngine(), store, backend, HealthState())

    meta = p.session_meta(
        p.session_meta_payload(session_id, "omni-grpc", "demo", "unknown", "", "", "/w"),
        timestamp=STAMP,
    )
    both = [
        p.user_text("run the tool", timestamp=STAMP),
        p.request_begin(timestamp=STAMP),
        p.tool_call("shell", "{}", CALL, timestamp=STAMP),
        p.request_end("completed", timestamp=STAMP),
    ]
    assert await recorder.append(owner, message_from_dict(meta))
    await event_log.publish(bodies.task_state_body(SessionState.RUNNING), fence=lease.token)
    published = []
    for item in both:  # the trace first, then the log, as the owner does
        body = bodies.message_body(message_from_dict(item))
        assert await recorder.append(owner, message_from_dict(item), body.data)
        # Numbered as the trace numbered it: the log says where it stopped.
        body = recorder.numbered(owner, body)
        published.append(await event_log.publish(body, fence=lease.token))
    # The task index has the run as its owner wrote it when it started.
    first = published[0].event_id
    started = TaskRecord(session_id, first, TaskStatus.WORKING, STAMP, STAMP, first, 2)
    await backend.tasks.put(started)
    for item in AHEAD[ahead]:  # the owner died before publishing these
        assert await recorder.append(owner, message_from_dict(item))

    # The owner renews nothing: its lease runs out and the run is an orphan.
    async def orphaned() -> None:
        while session_id not in await backend.leases.orphans():
            await asyncio.sleep(0.05)

    await asyncio.wait_for(orphaned(), WAIT)
    closer = Recorder(DemoEngine(), TraceStore(data), backend, HealthState())
    await Recovery(backend, closer, HealthState(), "closer").close_orphan(session_id)

    records = list(read_jsonl(store.paths(record)[-1]))
    outputs = [
        r.message.tool_call_output.tool_call_id
        for r in records
        if r.message.WhichOneof("payload") == "tool_call_output"
    ]
    assert outputs == [CALL]  # the owner's, and no second one from the closer
    # The closer wrote the run's end to the task index: failed, as its abort says.
    closed = await backend.tasks.get(session_id, first)
    assert closed is not None
    assert (closed.state, closed.reason) == (TaskStatus.FAILED, records[-1].message.abort.reason)
    assert (closed.first_record, closed.last_record) == (2, len(records))
    assert records[-1].message.WhichOneof("payload") == "abort"
    errors = [i for i in validate_records(records, trace=True) if i.severity == "error"]
    assert errors == []
    # The run is closed in the log too (the session takes runs again).
    window = await event_log.window()
    last = window[-1].server_event
    assert last is not None and last.task_state.state == bodies.agent_service_pb2.SESSION_STATE_IDLE
    # And its clients saw every record the trace holds, in the trace's order,
    # none twice: what the owner wrote past the log was published before the
    # close, lined up after the log's last record where it is, not where its
    # bytes recur.
    seen = [
        serialize_message(m)
        for m in (e.message for e in window)
        if m is not None
        and not m.origin
        and not (m.WhichOneof("payload") or "").startswith("partial_")
    ]
    assert seen == [serialize_message(r.message) for r in records[1:]]
