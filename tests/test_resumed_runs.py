"""A run goes on after its process is lost (#41): re-driven from its trace.

Real parts: ``omni-grpc serve`` replicas on one redis-server, the owner
killed with SIGKILL mid-run (streaming its answer, or while its turn's first
request streams); a lone server killed and started again on its data dir.
The run ends ``completed`` with its answer under the same task; its trace
validates, and the reference's ``resumeTrace`` reads it with nothing left to
carry over; the demo's tool ran once per call (its output is recorded once);
a client attached on another replica reads one stream, in order, without a
duplicate. With ``--resume-runs 0`` the run is closed as before.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import ServeProcess
from redis_server import RedisServer
from test_scale_out import OWNER_LOSS, WAIT, is_idle_end, stub, trace_records, validate_records_of

from omni_grpc.convert import message_to_dict
from omni_grpc.runtime.resumption import RESUMED_REASON
from omni_grpc.trace.resume import resume_trace
from omni_grpc_proto.omni.v1 import agent_service_pb2 as pb
from omni_grpc_proto.omni.v1 import omni_pb2

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
                "--no-http", "--pacing", "0.02", "--engine-opt", "repeat=3",
                *extra,
            )
            for _ in range(count)
        ]  # fmt: skip

    return start


def payload(response: pb.RunResponse | pb.AttachResponse) -> str:
    if response.WhichOneof("kind") != "message":
        return ""
    return response.message.WhichOneof("payload") or ""


async def until(call: object, stop: Callable[[object], bool]) -> list[object]:
    seen: list[object] = []

    async def read() -> None:
        async for response in call:  # type: ignore[attr-defined]
            seen.append(response)
            if stop(response):
                return

    await asyncio.wait_for(read(), WAIT)
    return seen


def the_answer_streams(seen: list[object]) -> Callable[[object], bool]:
    """True at the first text delta after the tool's output (request 2)."""

    def stop(response: object) -> bool:
        seen.append(response)
        after_output = any(payload(r) == "tool_call_output" for r in seen)  # type: ignore[arg-type]
        return after_output and payload(response) == "partial_text"  # type: ignore[arg-type]

    return stop


def first_request_streams(response: object) -> bool:
    return payload(response) == "partial_text"  # type: ignore[arg-type]


def check_resumed(data: Path, session_id: str, stream: list[object]) -> None:
    records = trace_records(data, session_id)
    issues = validate_records_of(records)
    assert [i for i in issues if i.severity == "error"] == []  # type: ignore[attr-defined]
    kinds = [r["payload"].get("type") for r in records]
    # The interruption is marked, and the task went on: no abort anywhere.
    marks = [
        r for r in records
        if r["payload"].get("type") == "request_end"
        and r["payload"].get("error_message") == RESUMED_REASON
    ]  # fmt: skip
    assert len(marks) == 1, kinds
    assert "abort" not in kinds
    # It ends with its answer, committed; the reference's resume has nothing to carry.
    assert kinds[-1] == "request_end" and records[-1]["payload"]["status"] == "completed"
    assert resume_trace(records).carry_over == []
    # Each tool call ran once: one output per call id.
    outputs = [
        r["payload"]["tool_call_id"]
        for r in records
        if kinds[records.index(r)] == "tool_call_output"
    ]
    assert len(outputs) == len(set(outputs)), outputs
    # The attached client read one stream: ordered, no duplicate, one idle at its end.
    ids = [r.event_id for r in stream if r.event_id]  # type: ignore[attr-defined]
    seqs = [int(i.rsplit("-", 1)[1]) for i in ids]
    assert seqs == sorted(set(seqs)), seqs
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), "a gap in the stream"
    idles = [r for r in stream if is_idle_end(r)]  # type: ignore[arg-type]
    assert len(idles) == 1
    # Every record the trace holds past session_meta was seen by the client.
    seen = [
        message_to_dict(r.message)  # type: ignore[attr-defined]
        for r in stream
        if payload(r) and not payload(r).startswith("partial_")  # type: ignore[arg-type]
    ]
    assert [m["payload"] for m in seen] == [r["payload"] for r in records[1:]]


@pytest.mark.parametrize("moment", ["answer", "first-request"])
async def test_a_run_whose_replica_is_killed_goes_on_on_another(
    replicas: Replicas, tmp_path: Path, moment: str
) -> None:
    a, b = replicas(2)
    run = stub(a).Run(pb.RunRequest(prompt="go on after me"))
    first = await until(run, lambda r: True)
    session_id, epoch = first[0].session_id, first[0].event_id.rsplit("-", 1)[0]  # type: ignore[attr-defined]
    # B's client follows the session from its first event.
    attach = stub(b).Attach(pb.AttachRequest(session_id=session_id, after_event_id=f"{epoch}-0"))
    stop = the_answer_streams([]) if moment == "answer" else first_request_streams
    await until(run, stop)
    os.kill(a.process.pid, signal.SIGKILL)
    stream = await until(attach, is_idle_end)  # type: ignore[arg-type]
    check_resumed(tmp_path / "shared-data", session_id, stream)


async def test_without_resumption_the_run_is_closed_as_before(
    replicas: Replicas, tmp_path: Path
) -> None:
    a, b = replicas(2, "--resume-runs", "0")
    run = stub(a).Run(pb.RunRequest(prompt="close me"))
    first = await until(run, first_request_streams)
    session_id, epoch = first[0].session_id, first[0].event_id.rsplit("-", 1)[0]  # type: ignore[attr-defined]
    os.kill(a.process.pid, signal.SIGKILL)
    attach = stub(b).Attach(pb.AttachRequest(session_id=session_id, after_event_id=f"{epoch}-0"))
    stream = await until(attach, is_idle_end)  # type: ignore[arg-type]
    assert "abort" in [payload(r) for r in stream]  # type: ignore[arg-type]
    kinds = [r["payload"].get("type") for r in trace_records(tmp_path / "shared-data", session_id)]
    assert kinds[-1] == "abort"


async def test_a_lone_server_restarted_on_its_data_dir_resumes_the_run(
    serve_process: Callable[..., ServeProcess], tmp_path: Path
) -> None:
    data = tmp_path / "lone"
    args = ("--data-dir", str(data), "--no-http", "--pacing", "0.02", "--engine-opt", "repeat=3")
    first = serve_process(*args)
    run = stub(first).Run(pb.RunRequest(prompt="survive a restart"))
    seen = await until(run, the_answer_streams([]))
    session_id = seen[0].session_id  # type: ignore[attr-defined]
    os.kill(first.process.pid, signal.SIGKILL)
    first.process.wait(10)
    second = serve_process(*args)

    def answered() -> bool:
        records = trace_records(data, session_id)
        kinds = [r["payload"].get("type") for r in records]
        if "abort" in kinds:
            return True  # closed instead: the assertions below say so
        marked = [
            i for i, r in enumerate(records) if r["payload"].get("error_message") == RESUMED_REASON
        ]
        return bool(marked) and kinds[-2:] == ["token_usage", "request_end"] and kinds[-3] == "text"

    async def poll() -> None:
        while not answered():
            await asyncio.sleep(0.05)

    await asyncio.wait_for(poll(), WAIT)
    # The restarted server's clients see the run end (its idle).
    attach = stub(second).Attach(pb.AttachRequest(session_id=session_id))
    await until(attach, lambda r: is_idle_end(r))  # type: ignore[arg-type]
    records = trace_records(data, session_id)
    kinds = [r["payload"].get("type") for r in records]
    assert "abort" not in kinds
    assert kinds[-1] == "request_end" and records[-1]["payload"]["status"] == "completed"
    assert resume_trace(records).carry_over == []
    issues = validate_records_of(records)
    assert [i for i in issues if i.severity == "error"] == []  # type: ignore[attr-defined]


async def test_an_approval_pending_when_the_owner_dies_is_asked_again_and_answerable_elsewhere(
    replicas: Replicas, tmp_path: Path
) -> None:
    a, b = replicas(2)
    run = stub(a).Run(pb.RunRequest(prompt="ask me", approval_mode=pb.APPROVAL_MODE_ASK))

    def asked(response: object) -> bool:
        r = response  # type: ignore[assignment]
        return r.WhichOneof("kind") == "event" and r.event.HasField("approval_request")  # type: ignore[attr-defined,no-any-return]

    first = await until(run, asked)
    session_id, epoch = first[0].session_id, first[0].event_id.rsplit("-", 1)[0]  # type: ignore[attr-defined]
    attach = stub(b).Attach(pb.AttachRequest(session_id=session_id, after_event_id=f"{epoch}-0"))
    os.kill(a.process.pid, signal.SIGKILL)

    # B's client sees the first ask, then the resumed turn's ask (the task's
    # approval mode went with it), and answers it on B.
    # (An Attach also gets the asks pending when it attaches, unicast.)
    def asked_again(response: object) -> bool:
        r = response  # type: ignore[assignment]
        return (
            asked(r) and r.event.approval_request.tool_call.tool_call.tool_call_id == "call_demo_2"
        )  # type: ignore[attr-defined,no-any-return]

    stream = await until(attach, asked_again)
    call_id = "call_demo_2"
    await stub(b).Approve(
        pb.ApproveRequest(
            session_id=session_id, tool_call_id=call_id, decision=omni_pb2.DECISION_ALLOW
        )
    )
    stream += await until(attach, is_idle_end)  # type: ignore[arg-type]
    check_resumed(tmp_path / "shared-data", session_id, stream)
    records = trace_records(tmp_path / "shared-data", session_id)
    outputs = {
        r["payload"]["tool_call_id"]: r["payload"]["stop_reason"]  # type: ignore[index]
        for r in records
        if r["payload"].get("type") == "tool_call_output"  # type: ignore[union-attr]
    }
    # The first call never ran (answered as not run); the second ran once.
    assert outputs == {"call_demo_1": "aborted", "call_demo_2": "completed"}


async def test_a_task_that_keeps_losing_its_process_ends_with_a_clear_abort(
    serve_process: Callable[..., ServeProcess], tmp_path: Path
) -> None:
    """A poison prompt: its process is lost each time; with --resume-runs 1
    the task is resumed once, then closed with an abort that says why."""
    data = tmp_path / "poison"
    args = (
        "--data-dir", str(data), "--no-http", "--pacing", "0.05", "--engine-opt", "repeat=20",
        "--resume-runs", "1",
    )  # fmt: skip
    first = serve_process(*args)
    run = stub(first).Run(pb.RunRequest(prompt="kill me"))
    seen = await until(run, first_request_streams)
    session_id = seen[0].session_id  # type: ignore[attr-defined]
    os.kill(first.process.pid, signal.SIGKILL)
    first.process.wait(10)

    def kinds() -> list[str]:
        return [str(r["payload"].get("type")) for r in trace_records(data, session_id)]

    async def until_trace(check: Callable[[list[str]], bool]) -> None:
        while not check(kinds()):
            await asyncio.sleep(0.05)

    second = serve_process(*args)  # resumes it (the first resumption)...

    # ... and is lost while the resumed run streams (a record past the mark).
    def has_mark() -> bool:
        records = trace_records(data, session_id)
        return any(r["payload"].get("error_message") == RESUMED_REASON for r in records)  # type: ignore[union-attr]

    async def mark() -> None:
        while not has_mark():
            await asyncio.sleep(0.05)

    await asyncio.wait_for(mark(), WAIT)
    marked = len(trace_records(data, session_id))
    await asyncio.wait_for(until_trace(lambda k: len(k) > marked + 2), WAIT)
    os.kill(second.process.pid, signal.SIGKILL)
    second.process.wait(10)
    serve_process(*args)  # refuses a second resumption: closes the task
    await asyncio.wait_for(until_trace(lambda k: k[-1] == "abort"), WAIT)
    records = trace_records(data, session_id)
    assert "interrupted 2 times" in str(records[-1]["payload"]["reason"])  # type: ignore[index]
    marks = [r for r in records if r["payload"].get("error_message") == RESUMED_REASON]  # type: ignore[union-attr]
    assert len(marks) == 1
    issues = validate_records_of(records)
    assert [i for i in issues if i.severity == "error"] == []  # type: ignore[attr-defined]
