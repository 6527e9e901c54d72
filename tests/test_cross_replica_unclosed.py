"""A run its trace storage stopped on replica A is closed in the trace by
the next run of the session, on whichever replica that run lands.

Real parts: two ``omni-grpc serve`` replicas on one redis-server, sharing a
data dir on a real tmpfs that fills part-way through A's run. The mark that
the trace holds a run open is in the session's record (Redis), not in A.
"""

from __future__ import annotations

from collections.abc import Callable

import grpc
import pytest
from conftest import ServeProcess
from redis_server import RedisServer
from small_disk import SmallDisk
from test_scale_out import OWNER_LOSS, read_until_idle, stub, trace_records, validate_records_of

from omni_grpc.convert import message_to_dict
from omni_grpc.runtime.recovery import UNRECORDED_REASON
from omni_grpc_proto.omni.v1 import agent_service_pb2 as pb


async def test_a_run_left_open_on_a_is_closed_by_the_next_run_on_b(
    serve_process: Callable[..., ServeProcess], redis: RedisServer, small_disk: SmallDisk
) -> None:
    data = small_disk.path / "data"
    a, b = (
        serve_process(
            "--redis-url", redis.url,
            "--data-dir", str(data),
            "--owner-loss-timeout", OWNER_LOSS,
            "--no-http",
            "--engine-opt", "repeat=200",
        )
        for _ in range(2)
    )  # fmt: skip
    small_disk.leave(pages=2)  # the run starts, and the disk fills part-way
    received: list[pb.RunResponse] = []
    with pytest.raises(grpc.aio.AioRpcError) as failed:
        async for response in stub(a).Run(pb.RunRequest(prompt="fill it")):
            received.append(response)
    assert failed.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    session_id = received[0].session_id
    records = trace_records(data, session_id)
    assert records[-1]["payload"]["type"] != "abort"  # type: ignore[index]
    small_disk.free()

    again = stub(b).Run(pb.RunRequest(session_id=session_id, prompt="again"))
    rest = await read_until_idle(again)
    assert rest[-1].event.task_state.state == pb.SESSION_STATE_IDLE  # type: ignore[attr-defined]
    records = trace_records(data, session_id)
    payloads: list[dict[str, object]] = [r["payload"] for r in records]  # type: ignore[misc]
    # The close A's client was sent (numbered in the log as the trace numbers
    # it) is what B records, as sent (#41): the trace tells the stream's story.
    told = [
        message_to_dict(r.message)["payload"]
        for r in received
        if r.HasField("message") and r.message.HasField("abort")
    ]
    assert len(told) == 1 and told[0]["reason"] != UNRECORDED_REASON
    closes = [i for i, p in enumerate(payloads) if p.get("type") == "abort"]
    assert [payloads[i] for i in closes] == told
    inputs = [
        i for i, p in enumerate(payloads) if p.get("type") == "text" and p.get("text") == "again"
    ]
    assert len(closes) == 1 and len(inputs) == 1
    assert closes[0] < inputs[0]  # closed before B recorded anything of its own
    errors = [i for i in validate_records_of(records) if i.severity == "error"]  # type: ignore[attr-defined]
    assert errors == []
    [info] = (await stub(a).ListSessions(pb.ListSessionsRequest())).sessions
    assert info.message_count == len(records)
