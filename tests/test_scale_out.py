"""Three ``omni-grpc serve`` replicas on one redis-server and one data dir.

Real processes throughout: a redis-server of the test's own (AOF, fsync on
every write) and three serve subprocesses sharing it and a data directory.
Every wait is on a condition (an event, a status); the timeouts around them
only stop a broken run from hanging the suite.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import grpc
import orjson
import pytest
import redis.asyncio as aioredis
from conftest import ServeProcess
from grpc_health.v1 import health_pb2, health_pb2_grpc
from redis_server import RedisServer

from omni_grpc.convert import message_to_dict
from omni_grpc.runtime.hub import BACKEND_LOST_REASON
from omni_grpc.trace import read_jsonl
from omni_grpc.trace.index import TRAILER_BYTES, Trailer
from omni_grpc.trace.validate import validate_records
from omni_grpc.vocabulary import AbortKind
from omni_grpc_proto.omni.v1 import agent_service_pb2 as pb
from omni_grpc_proto.omni.v1 import agent_service_pb2_grpc, omni_pb2

WAIT = 60.0  # a safety net against hangs, never the thing a test checks
OWNER_LOSS = "2"  # seconds: how fast a dead owner's run is closed


Replicas = Callable[..., list[ServeProcess]]


@pytest.fixture
def replicas(
    serve_process: Callable[..., ServeProcess], redis: RedisServer, tmp_path: Path
) -> Replicas:
    def start(count: int = 3, *extra: str) -> list[ServeProcess]:
        shared = tmp_path / "shared-data"
        return [
            serve_process(
                "--redis-url", redis.url,
                "--data-dir", str(shared),
                "--owner-loss-timeout", OWNER_LOSS,
                "--no-http",
                *extra,
            )
            for _ in range(count)
        ]  # fmt: skip

    return start


# One channel per replica and event loop. Keyed by the loop as well: other
# modules use stub() without this module's closing fixture, so a channel of a
# test whose loop has closed may still be here, and a later replica can come
# up on the same port; it must get a channel of its own loop, not that one.
_channels: dict[tuple[asyncio.AbstractEventLoop, str], grpc.aio.Channel] = {}


def stub(server: ServeProcess) -> agent_service_pb2_grpc.AgentServiceStub:
    """A stub on one channel per replica (closed after each test of this
    module; another module's are dropped once their loop has closed)."""
    loop = asyncio.get_running_loop()
    for key in [key for key in _channels if key[0].is_closed()]:
        del _channels[key]  # its loop is gone: it can be neither used nor closed
    channel = _channels.get((loop, server.grpc_address))
    if channel is None:
        channel = grpc.aio.insecure_channel(server.grpc_address)
        _channels[loop, server.grpc_address] = channel
    return agent_service_pb2_grpc.AgentServiceStub(channel)


@pytest.fixture(autouse=True)
async def _close_channels() -> AsyncIterator[None]:
    yield
    loop = asyncio.get_running_loop()
    for key in [key for key in _channels if key[0] is loop]:
        await _channels.pop(key).close()


def is_idle_end(response: pb.RunResponse | pb.AttachResponse) -> bool:
    return (
        response.WhichOneof("kind") == "event"
        and response.event.WhichOneof("kind") == "task_state"
        and response.event.task_state.state == pb.SESSION_STATE_IDLE
    )


def seq(event_id: str) -> int:
    return int(event_id.rsplit("-", 1)[1])


def frame(response: pb.RunResponse | pb.AttachResponse) -> tuple[str, bytes]:
    """An event as a client sees it: its id and its payload's exact bytes."""
    kind = response.WhichOneof("kind")
    body = response.message if kind == "message" else response.event
    return response.event_id, body.SerializeToString(deterministic=True)


async def read_until_idle(call: object, *, skip_first_idle: bool = False) -> list[object]:
    out: list[object] = []
    seen_idle = False

    async def read() -> None:
        nonlocal seen_idle
        async for response in call:  # type: ignore[attr-defined]
            out.append(response)
            if is_idle_end(response):
                if skip_first_idle and not seen_idle:
                    seen_idle = True
                    continue
                return

    await asyncio.wait_for(read(), WAIT)
    return out


async def first_event(call: object) -> object:
    async def read() -> object:
        async for response in call:  # type: ignore[attr-defined]
            return response
        raise AssertionError("the stream ended before its first event")

    return await asyncio.wait_for(read(), WAIT)


def trace_records(data_dir: Path, session_id: str) -> list[dict[str, object]]:
    [shard] = sorted((data_dir / "traces").glob(f"*/{session_id}_*.jsonl"))
    return [message_to_dict(r.message) for r in read_jsonl(shard)]


async def test_attach_on_b_to_a_run_on_a_is_byte_identical(replicas: Replicas) -> None:
    a, b, _c = replicas(3, "--pacing", "0.01")
    run = stub(a).Run(pb.RunRequest(prompt="hello"))
    first = await first_event(run)
    session_id, epoch = first.session_id, first.event_id.rsplit("-", 1)[0]  # type: ignore[attr-defined]
    # From the very start of the log, on another replica, while A still runs.
    attach = stub(b).Attach(pb.AttachRequest(session_id=session_id, after_event_id=f"{epoch}-0"))
    own = [first, *await read_until_idle(run)]
    seen = await read_until_idle(attach)
    own_frames = [frame(r) for r in own]  # type: ignore[arg-type]
    # B's stream is A's, plus the unicast task_state B got as it attached.
    attached = [frame(r) for r in seen]  # type: ignore[arg-type]
    extra = [f for f in attached if f not in own_frames]
    assert len(extra) == 1 and [f for f in attached if f in own_frames] == own_frames
    assert len(own_frames) > 20


async def test_approve_on_c_resolves_a_pending_call_on_a(replicas: Replicas) -> None:
    a, _b, c = replicas(3)
    run = stub(a).Run(pb.RunRequest(prompt="list it", approval_mode=pb.APPROVAL_MODE_ASK))
    seen = []
    async for response in run:
        seen.append(response)
        if response.WhichOneof("kind") == "event" and response.event.HasField("approval_request"):
            break
    request = seen[-1].event.approval_request
    session_id = seen[-1].session_id
    tool_call_id = request.tool_call.tool_call.tool_call_id
    # Unknown calls are refused on C like anywhere else.
    with pytest.raises(grpc.aio.AioRpcError) as unknown:
        await stub(c).Approve(
            pb.ApproveRequest(
                session_id=session_id, tool_call_id="nope", decision=omni_pb2.DECISION_ALLOW
            )
        )
    assert unknown.value.code() == grpc.StatusCode.NOT_FOUND
    await stub(c).Approve(
        pb.ApproveRequest(
            session_id=session_id, tool_call_id=tool_call_id, decision=omni_pb2.DECISION_ALLOW
        )
    )
    rest = await read_until_idle(run)
    decisions = [
        r.message.approval_decision  # type: ignore[attr-defined]
        for r in rest
        if r.WhichOneof("kind") == "message"  # type: ignore[attr-defined]
        and r.message.HasField("approval_decision")  # type: ignore[attr-defined]
    ]
    assert [(d.tool_call_id, d.decision) for d in decisions] == [
        (tool_call_id, omni_pb2.DECISION_ALLOW)
    ]


async def test_concurrent_runs_across_replicas_give_exactly_one_busy(replicas: Replicas) -> None:
    servers = replicas(3, "--pacing", "0.01")
    first = stub(servers[0]).Run(pb.RunRequest(prompt="make a session"))
    session_id = (await read_until_idle(first))[0].session_id  # type: ignore[attr-defined]
    for _round in range(3):
        calls = [stub(s).Run(pb.RunRequest(prompt="go", session_id=session_id)) for s in servers]

        async def outcome(call: object) -> str:
            try:
                await read_until_idle(call)
            except grpc.aio.AioRpcError as exc:
                return exc.code().name
            return "OK"

        results = await asyncio.gather(*(outcome(c) for c in calls))
        assert sorted(results) == ["ABORTED", "ABORTED", "OK"]


async def test_killing_the_owner_mid_run_loses_nothing(replicas: Replicas, tmp_path: Path) -> None:
    # Resumption off: the close path (tests/test_resumed_runs.py resumes it).
    a, b, c = replicas(3, "--pacing", "0.02", "--engine-opt", "repeat=20", "--resume-runs", "0")
    run = stub(a).Run(pb.RunRequest(prompt="a long answer"))
    received = []
    async for response in run:
        received.append(response)
        if len(received) == 30:
            break
    session_id = received[0].session_id
    last_id = received[-1].event_id
    # A witness on C that reads the whole log, from before the kill to the close.
    witness = stub(c).Attach(pb.AttachRequest(session_id=session_id, after_event_id=last_id))
    witnessed = [await first_event(witness)]  # attached before the kill
    os.kill(a.process.pid, signal.SIGKILL)
    a.process.wait()
    resumed = await read_until_idle(
        stub(b).Attach(pb.AttachRequest(session_id=session_id, after_event_id=last_id))
    )
    watched = witnessed + await read_until_idle(witness)
    resumed_frames = [frame(r) for r in resumed]  # type: ignore[arg-type]
    watched_frames = [frame(w) for w in watched]  # type: ignore[arg-type]
    # B replays from the id A's client last saw and C watched live through the
    # kill: both, on two replicas, got every later logged event once, in order;
    # each has at most its own unicast task_state besides.
    logged_b = [f for f in resumed_frames if f in watched_frames]
    assert logged_b == [f for f in watched_frames if f in resumed_frames]
    assert len(resumed_frames) - len(logged_b) <= 1
    assert len(watched_frames) - len(logged_b) == 1
    seqs = [seq(i) for i, _ in resumed_frames]
    assert seqs == sorted(set(seqs)) and seqs[0] > seq(last_id)
    # The run was closed as an abort would close it, then the session went idle.
    messages = [r for r in resumed if r.WhichOneof("kind") == "message"]  # type: ignore[attr-defined]
    abort = messages[-1].message.abort  # type: ignore[attr-defined]
    # It says whose run it was and who closed it (tests/test_paused_owner.py).
    assert abort.reason.startswith(AbortKind.REPLICA_LOST.default_reason + ": replica ")
    assert "stopped renewing its run lease" in abort.reason, abort.reason
    assert is_idle_end(resumed[-1])  # type: ignore[arg-type]
    # The trace says the same, and validates.
    data_dir = tmp_path / "shared-data"
    records = trace_records(data_dir, session_id)
    assert records[-1]["payload"] == {"type": "abort", "reason": abort.reason}
    assert [i for i in validate_records_of(records) if i.severity == "error"] == []  # type: ignore[attr-defined]
    # The session takes new runs, on any replica.
    again = await read_until_idle(stub(c).Run(pb.RunRequest(prompt="again", session_id=session_id)))
    assert is_idle_end(again[-1])  # type: ignore[arg-type]
    # Every replica left agrees on the session and its history, and both are the trace.
    lists = [await stub(s).ListSessions(pb.ListSessionsRequest()) for s in (b, c)]
    assert lists[0] == lists[1]
    histories = []
    for server in (b, c):
        call = stub(server).GetHistory(pb.GetHistoryRequest(session_id=session_id))
        histories.append([r.message.SerializeToString() async for r in call])
    assert histories[0] == histories[1]
    assert len(histories[0]) == len(trace_records(data_dir, session_id))
    assert lists[0].sessions[0].message_count == len(histories[0])


def validate_records_of(records: list[dict[str, object]]) -> list[object]:
    from omni_grpc.convert import message_from_dict
    from omni_grpc.trace.records import TraceRecord

    return list(
        validate_records(
            [TraceRecord(i + 1, message_from_dict(r)) for i, r in enumerate(records)], trace=True
        )
    )


async def health(server: ServeProcess) -> int:
    channel = grpc.aio.insecure_channel(server.grpc_address)
    try:
        reply = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
        return int(reply.status)
    finally:
        await channel.close()


async def until_health(server: ServeProcess, status: int) -> None:
    async def poll() -> None:
        while await health(server) != status:
            await asyncio.sleep(0.1)

    await asyncio.wait_for(poll(), WAIT)


async def test_redis_killed_and_restarted_with_aof_keeps_every_acknowledged_event(
    replicas: Replicas, redis: RedisServer, tmp_path: Path
) -> None:
    data_dir = tmp_path / "shared-data"
    # The kill must find the run going. It goes by the server's progress, read
    # in Redis, not by what the client has read: the server runs ahead of a
    # slow client by what flow control lets through, and a client on a loaded
    # machine lagged 5 s, then 26 s, and saw the run complete before a kill
    # made at its 40th event. The answer lasts about 26 s past the log's 40th.
    a, b, _c = replicas(3, "--pacing", "0.02", "--engine-opt", "repeat=100")
    run = stub(a).Run(pb.RunRequest(prompt="a long answer"))
    acknowledged: list[tuple[str, bytes]] = []
    session: list[str] = []  # the run's, from its first event
    started = asyncio.Event()

    async def read() -> grpc.aio.AioRpcError:
        try:
            async for response in run:
                acknowledged.append(frame(response))
                session.append(response.session_id)
                started.set()
        except grpc.aio.AioRpcError as exc:
            return exc
        raise AssertionError("the run's stream ended OK though Redis was killed mid-run")

    reader = asyncio.create_task(read())
    await asyncio.wait_for(started.wait(), WAIT)
    events_key = f"omni:{{{session[0]}}}:events"
    admin: Any = aioredis.Redis.from_url(redis.url)  # replies typed bytes | str

    async def logged_40() -> None:
        while await admin.xlen(events_key) < 40:
            await asyncio.sleep(0.01)

    try:
        await asyncio.wait_for(logged_40(), WAIT)
    finally:
        await admin.aclose()
    redis.kill()  # SIGKILL, mid-run
    lost = await asyncio.wait_for(reader, WAIT)
    # The run's client is told: the stream ends with UNAVAILABLE, not OK.
    assert lost.code() == grpc.StatusCode.UNAVAILABLE
    await until_health(a, health_pb2.HealthCheckResponse.NOT_SERVING)
    redis.start()  # same port, same AOF
    await until_health(a, health_pb2.HealthCheckResponse.SERVING)
    [info] = (await stub(b).ListSessions(pb.ListSessionsRequest())).sessions
    session_id = info.session_id
    assert session_id == session[0]
    epoch = acknowledged[0][0].rsplit("-", 1)[0]
    replay = await read_until_idle(
        stub(b).Attach(pb.AttachRequest(session_id=session_id, after_event_id=f"{epoch}-0"))
    )
    logged = [frame(r) for r in replay]  # type: ignore[arg-type]
    # Everything A's client was sent is in the log after the crash, in order.
    assert [f for f in logged if f in acknowledged] == acknowledged
    # The run is recorded as failed in the trace (which validates), not left open.
    records = trace_records(data_dir, session_id)
    assert records[-1]["payload"] == {"type": "abort", "reason": BACKEND_LOST_REASON}
    assert [i for i in validate_records_of(records) if i.severity == "error"] == []  # type: ignore[attr-defined]
    # The run was closed (recorded as failed) and the session is idle again.
    assert is_idle_end(replay[-1])  # type: ignore[arg-type]
    again = await read_until_idle(stub(b).Run(pb.RunRequest(prompt="x", session_id=session_id)))
    assert is_idle_end(again[-1])  # type: ignore[arg-type]


async def test_a_stale_owner_that_comes_back_is_fenced(replicas: Replicas, tmp_path: Path) -> None:
    # The close path (resumption off): B closes A's run with an abort; the
    # resumed path's fencing is test_resumed_runs' and the chaos run's.
    a, b = replicas(2, "--pacing", "0.02", "--engine-opt", "repeat=20", "--resume-runs", "0")
    run = stub(a).Run(pb.RunRequest(prompt="a long answer"))
    received = []
    async for response in run:
        received.append(response)
        if len(received) == 20:
            break
    session_id = received[0].session_id
    # A stops (as a long GC pause or a frozen VM would stop it) and loses its lease.
    os.kill(a.process.pid, signal.SIGSTOP)
    try:
        closed = await read_until_idle(
            stub(b).Attach(
                pb.AttachRequest(session_id=session_id, after_event_id=received[-1].event_id)
            )
        )
    finally:
        os.kill(a.process.pid, signal.SIGCONT)
    last_logged = closed[-1].event_id  # type: ignore[attr-defined]
    data_dir = tmp_path / "shared-data"
    trace_after_close = trace_records(data_dir, session_id)
    assert trace_after_close[-1]["payload"]["type"] == "abort"  # type: ignore[index]
    # Back, A finds itself fenced and says so; it then writes nothing more.
    assert a.process.stderr is not None

    async def fenced_line() -> str:
        while True:
            line = await asyncio.to_thread(a.process.stderr.readline)  # type: ignore[union-attr]
            if "fenced" in line or "lost the run lease" in line:
                return line
            assert line, "A's stderr ended without saying it was fenced"

    await asyncio.wait_for(fenced_line(), WAIT)
    # The next events in the log are the next run's: nothing of A's came between.
    again = await read_until_idle(stub(b).Run(pb.RunRequest(prompt="x", session_id=session_id)))
    after_close = await read_until_idle(
        stub(b).Attach(pb.AttachRequest(session_id=session_id, after_event_id=last_logged))
    )
    assert [frame(r) for r in after_close] == [frame(r) for r in again]  # type: ignore[arg-type]
    # The trace: the close, then the next run, and nothing of A's in between.
    records = trace_records(data_dir, session_id)
    assert records[: len(trace_after_close)] == trace_after_close
    assert records[len(trace_after_close)]["payload"]["text"] == "x"  # type: ignore[index]


def test_serve_with_an_unreachable_redis_says_so_and_exits_1(tmp_path: Path) -> None:
    import subprocess
    import sys

    from redis_server import free_port

    url = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    done = subprocess.run(
        [sys.executable, "-m", "omni_grpc", "serve", "--grpc-port", "0", "--no-http",
         "--data-dir", str(tmp_path / "data"), "--redis-url", url],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 1
    assert "omni-grpc ready" not in done.stdout
    assert "--redis-url: the session store is unavailable" in done.stderr


async def history_pages(
    server: ServeProcess, session_id: str, size: int
) -> list[list[pb.GetHistoryResponse]]:
    """Every GetHistory page of ``size`` tasks, newest first."""
    pages: list[list[pb.GetHistoryResponse]] = []
    token = ""
    while True:
        call = stub(server).GetHistory(
            pb.GetHistoryRequest(
                session_id=session_id, page_size=size, page_token=token, include_json=True
            )
        )
        pages.append([r async for r in call])
        token = pages[-1][0].next_page_token if pages[-1] else ""
        if not token:
            return pages


async def test_any_replica_pages_a_history_the_replicas_wrote_together(
    replicas: Replicas, tmp_path: Path
) -> None:
    a, b = replicas(2)
    session_id = ""
    for n, server in enumerate([a, b, a, b]):
        run = stub(server).Run(pb.RunRequest(prompt=f"task {n}", session_id=session_id))
        responses = await read_until_idle(run)
        session_id = responses[0].session_id  # type: ignore[attr-defined]
    whole = [r.json async for r in stub(a).GetHistory(
        pb.GetHistoryRequest(session_id=session_id, include_json=True)
    )]  # fmt: skip
    for server in (a, b):
        pages = await history_pages(server, session_id, 1)
        assert len(pages) == 4
        assert [r.json for page in reversed(pages) for r in page] == whole
        prompts = [orjson.loads(page[0].json) for page in pages[:-1]]
        assert [m["payload"]["text"] for m in prompts] == ["task 3", "task 2", "task 1"]
    # The writers on both replicas kept the index covering the whole shard.
    [shard] = sorted((tmp_path / "shared-data" / "traces").glob(f"*/{session_id}_*.jsonl"))
    index = shard.with_name(shard.name + ".index")
    trailer = Trailer.unpack(index.read_bytes()[-TRAILER_BYTES:])
    assert trailer is not None and trailer.covered == shard.stat().st_size
    assert trailer.units == 4
