"""After any single fault, a session's trace and its event log agree, and the
trace validates with every tool call answered.

The source of truth at each step (docs/architecture.md, "Trace and log"): a
record is in the trace before anyone can see it; the log is what clients
saw. So after a fault the closer publishes what only the trace got before
the close, and the close it writes goes in both: every recordable event a
client could read is a trace record in the same order, and every trace
record (session_meta aside) is an event of the log.

Real parts: ``omni-grpc serve`` replicas on one redis-server (killed and
restarted on its AOF), owners killed with SIGKILL or stopped with SIGSTOP
past their lease.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest
from conftest import ServeProcess
from grpc_health.v1 import health_pb2
from redis_server import RedisServer
from test_scale_out import (
    OWNER_LOSS,
    WAIT,
    is_idle_end,
    read_until_idle,
    stub,
    trace_records,
    until_health,
    validate_records_of,
)

from omni_grpc.convert import message_to_dict, serialize_message
from omni_grpc.trace.resume import resume_trace
from omni_grpc_proto.omni.v1 import agent_service_pb2 as pb

Replicas = Callable[..., list[ServeProcess]]


@pytest.fixture
def replicas(
    serve_process: Callable[..., ServeProcess], redis: RedisServer, tmp_path: Path
) -> Replicas:
    def start(count: int, *extra: str) -> list[ServeProcess]:
        return [
            serve_process(
                "--redis-url", redis.url,
                "--data-dir", str(tmp_path / "shared-data"),
                "--owner-loss-timeout", OWNER_LOSS,
                "--no-http",
                *extra,
            )
            for _ in range(count)
        ]  # fmt: skip

    return start


async def whole_log(
    server: ServeProcess, session_id: str, epoch: str, after: str
) -> list[pb.AttachResponse]:
    """The session's log from its first event, once its run is closed."""
    # Closed: an Attach from the last id a client saw reaches an idle.
    await read_until_idle(
        stub(server).Attach(pb.AttachRequest(session_id=session_id, after_event_id=after))
    )
    out: list[pb.AttachResponse] = []
    call = stub(server).Attach(pb.AttachRequest(session_id=session_id, after_event_id=f"{epoch}-0"))

    async def read() -> None:
        # The replay ends with the last run's idle; the unicast task_state of
        # an idle session follows it at once (two idles in a row).
        async for response in call:
            out.append(response)
            if len(out) > 1 and is_idle_end(response) and is_idle_end(out[-2]):
                return

    await asyncio.wait_for(read(), WAIT)
    return out[:-1]


def logged_records(log: list[pb.AttachResponse]) -> list[bytes]:
    """The recordable messages of the log, as their bytes, in log order."""
    out = []
    for response in log:
        if response.WhichOneof("kind") != "message":
            continue
        msg = response.message
        if (msg.WhichOneof("payload") or "").startswith("partial_") or msg.origin:
            continue
        out.append(serialize_message(msg))
    return out


def recorded(data: Path, session_id: str) -> list[bytes]:
    from omni_grpc.convert import message_from_dict

    return [serialize_message(message_from_dict(r)) for r in trace_records(data, session_id)[1:]]


def check_session(data: Path, session_id: str, log: list[pb.AttachResponse]) -> None:
    records = trace_records(data, session_id)
    assert logged_records(log) == recorded(data, session_id)
    issues = validate_records_of(records)
    assert [i for i in issues if i.severity in ("error", "warning")] == []  # type: ignore[attr-defined]
    # The reference's resume keeps every output: no call is left to a placeholder.
    resumed = resume_trace(records)
    calls = {  # completed calls are owed an output (one cut short ran nothing)
        m["payload"]["tool_call_id"]
        for m in records
        if m["payload"].get("type") == "tool_call"
        and m["payload"].get("stop_reason", "completed") == "completed"
    }
    outputs = {
        m["payload"]["tool_call_id"]
        for m in records
        if m["payload"].get("type") == "tool_call_output"
    }
    assert calls <= outputs, (calls, outputs, resumed.carry_over)


async def approval_asked(call: object) -> list[pb.RunResponse]:
    seen: list[pb.RunResponse] = []

    async def read() -> None:
        async for response in call:  # type: ignore[attr-defined]
            seen.append(response)
            if response.WhichOneof("kind") == "event" and response.event.HasField(
                "approval_request"
            ):
                return

    await asyncio.wait_for(read(), WAIT)
    return seen


@pytest.mark.parametrize("fault", ["SIGKILL", "SIGSTOP"])
async def test_an_owner_lost_while_a_call_waits_on_its_approval_answers_the_call(
    replicas: Replicas, tmp_path: Path, fault: str
) -> None:
    # Resumption off: the close path (tests/test_resumed_runs.py resumes it).
    a, b = replicas(2, "--resume-runs", "0")
    seen = await approval_asked(
        stub(a).Run(pb.RunRequest(prompt="list it", approval_mode=pb.APPROVAL_MODE_ASK))
    )
    session_id, epoch = seen[0].session_id, seen[0].event_id.rsplit("-", 1)[0]
    os.kill(a.process.pid, getattr(signal, fault))
    try:
        # B's sweep takes the expired lease over and closes the run.
        log = await whole_log(b, session_id, epoch, seen[-1].event_id)
    finally:
        if fault == "SIGSTOP":
            os.kill(a.process.pid, signal.SIGCONT)
    check_session(tmp_path / "shared-data", session_id, log)
    outputs = [
        message_to_dict(r.message)["payload"]
        for r in log
        if r.WhichOneof("kind") == "message" and r.message.HasField("tool_call_output")
    ]
    assert len(outputs) == 1 and outputs[0]["stop_reason"] == "aborted"


@pytest.mark.parametrize("fault", ["restart", "freeze"])
async def test_a_redis_fault_mid_run_leaves_the_trace_and_the_log_agreeing(
    replicas: Replicas, redis: RedisServer, tmp_path: Path, fault: str
) -> None:
    a, b = replicas(2, "--pacing", "0.05")
    run = stub(a).Run(pb.RunRequest(prompt="a long answer"))
    first: list[pb.RunResponse] = []
    with pytest.raises(grpc.aio.AioRpcError) as lost:
        async for response in run:
            first.append(response)
            # As the tool call starts: the call, its decision, its output and
            # the next request are records the engine makes without the log.
            if response.message.HasField("partial_tool_call"):
                # Mid-run: the engine goes on until a log write fails.
                if fault == "restart":
                    redis.kill()  # SIGKILL
                else:
                    assert redis.process is not None
                    os.kill(redis.process.pid, signal.SIGSTOP)  # frozen: writes hang
    assert lost.value.code() == grpc.StatusCode.UNAVAILABLE
    await until_health(a, health_pb2.HealthCheckResponse.NOT_SERVING)
    if fault == "restart":
        redis.start()  # same port, same AOF
    else:
        assert redis.process is not None
        os.kill(redis.process.pid, signal.SIGCONT)
    await until_health(a, health_pb2.HealthCheckResponse.SERVING)
    session_id, epoch = first[0].session_id, first[0].event_id.rsplit("-", 1)[0]
    log = await whole_log(b, session_id, epoch, first[-1].event_id)
    check_session(tmp_path / "shared-data", session_id, log)
    # What A's client was sent is a prefix of the log.
    ids = [r.event_id for r in log]
    assert [r.event_id for r in first if r.event_id] == ids[: len([r for r in first if r.event_id])]
