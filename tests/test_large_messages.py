"""Large messages end to end, with real servers (``omni-grpc serve``) on the
memory and the Redis backends: prompts of 1 to 60 MiB that the demo engine
echoes (in its thinking and its answer), one long word or a log of many
words, reach every reader whole, on gRPC, the reference SSE stream and the
dialect; a reader slowed past the window is told, and its gRPC call never
ends OK; past the record limit the request is refused, naming the size."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Iterable
from typing import Any

import grpc
import httpx
import pytest
import redis.asyncio as aioredis
from conftest import ServeProcess
from redis_server import RedisServer

from omni_grpc import protocol
from omni_grpc.client import AgentClient, AgentError
from omni_grpc.client.events import StreamEvent
from omni_grpc.client.sse import read_dialect, read_reference
from omni_grpc.convert import message_to_dict
from omni_grpc.message_size import GRPC_MAX_MESSAGE_BYTES, MAX_MESSAGE_BYTES
from omni_grpc.runtime.events import parse_event_id
from omni_grpc.vocabulary import DialectEventName
from omni_grpc_proto.omni.v1 import agent_service_pb2 as pb
from omni_grpc_proto.omni.v1 import omni_pb2 as pb_omni

MiB = 1 << 20
Serve = Callable[..., ServeProcess]


def prompt_of(mib: float) -> str:
    return "p" * int(mib * MiB)


@pytest.fixture(params=["memory", "redis"])
def serve(
    request: pytest.FixtureRequest, serve_process: Callable[..., ServeProcess]
) -> Callable[..., ServeProcess]:
    def start(*args: str) -> ServeProcess:
        if request.param == "redis":
            redis: RedisServer = request.getfixturevalue("redis")
            args = ("--redis-url", redis.url, *args)
        return serve_process(*args)

    return start


async def grpc_run(address: str, prompt: str) -> tuple[list[StreamEvent], AgentError | None]:
    events: list[StreamEvent] = []
    async with AgentClient(address) as client:
        try:
            async for event in client.run(prompt):
                events.append(event)
        except AgentError as exc:
            return events, exc
    return events, None


def texts(events: list[StreamEvent]) -> list[str]:
    """The complete thinking and text messages."""
    return message_texts(event.message for event in events)


def message_texts(messages: Iterable[pb_omni.OmniMessage | None]) -> list[str]:
    out = []
    for message in messages:
        if message is not None:
            arm = message.WhichOneof("payload")
            if arm == "text":
                out.append(message.text.text)
            elif arm == "thinking":
                out.append(message.thinking.thinking)
    return out


def assert_whole(events: list[StreamEvent], prompt: str, first_seq: int) -> None:
    """Every event of the run, in order, none missing: the ids run on without
    a gap from the run's first (``first_seq``, its input) to its task end, and
    each segment's deltas join to its complete message. (The number of events
    is the engine's to choose: the demo cuts a long echo into fewer, longer
    deltas.)"""
    kinds = [e.kind for e in events]
    assert "@resync_required" not in kinds
    seqs = [parse_event_id(e.event_id) for e in events]
    assert all(s is not None for s in seqs)
    assert len({s[0] for s in seqs if s}) == 1, "one epoch"
    assert [s[1] for s in seqs if s] == list(range(first_seq, first_seq + len(events))), kinds
    first = events[0].message
    assert first is not None and first.WhichOneof("payload") == "text"
    assert first.text.text == prompt, "the run's input comes first, whole"
    assert_deltas_join(events)
    echoed = [t for t in texts(events) if repr(prompt) in t]
    assert len(echoed) == 2, "the thinking and the answer each echo the prompt whole"
    assert events[-1].is_task_end


def assert_deltas_join(events: list[StreamEvent]) -> None:
    """Each segment's deltas join to the complete message after them."""
    messages = [message_to_dict(e.message) for e in events if e.message is not None]
    partials = [m for m in messages if m["payload"]["type"].startswith("partial_")]
    completes = [
        m["payload"]
        for m in messages[1:]  # after the run's input
        if m["payload"]["type"] in ("text", "thinking", "tool_call")
    ]
    aggregated = [m["payload"] for m in protocol.aggregate_all(partials)]
    assert [p for p in aggregated if p["type"] != "tool_call_output"] == completes


@pytest.mark.parametrize("mib", [1, 3, 8, 16, 60])
async def test_a_lone_grpc_reader_gets_every_event_of_a_large_prompt(
    serve: Serve, mib: int, request: pytest.FixtureRequest
) -> None:
    server = serve()
    prompt = prompt_of(mib)
    events, error = await grpc_run(server.grpc_address, prompt)
    assert error is None, error
    assert_whole(events, prompt, 1)  # a new session's first run


@pytest.mark.parametrize("mib", [1, 3, 8, 16, 60])
async def test_ten_readers_each_get_every_event_of_a_large_prompt(serve: Serve, mib: int) -> None:
    server = serve()
    async with AgentClient(server.grpc_address) as client:
        # A first small run makes the session and the ids to attach from.
        small = client.run("hi")
        sid = await small.session()
        before = [event async for event in small]
        first = before[0].event_id
        # Nine more readers of the session, attached from that run's first
        # event before the large run starts (a reader attached only once the
        # window has moved past its id is told to resync, by design): each is
        # replayed the small run, then joins live.
        joined = [asyncio.Event() for _ in range(9)]

        async def attach(joined: asyncio.Event) -> list[StreamEvent]:
            out: list[StreamEvent] = []
            running = False  # the large run's first message was seen
            async for event in client.attach(sid, first):
                out.append(event)
                if event.event_id == before[-1].event_id:
                    joined.set()  # the replay is done: the session's state, then live
                elif joined.is_set() and event.message is not None:
                    running = True
                elif running and event.is_task_end:
                    break
            return out

        watchers = [asyncio.create_task(attach(j)) for j in joined]
        await asyncio.wait_for(asyncio.gather(*(j.wait() for j in joined)), 120)
        prompt = prompt_of(mib)
        events = [event async for event in client.run(prompt, session_id=sid)]
        attached = await asyncio.wait_for(asyncio.gather(*watchers), 300)
    # The run's first event, as an attached reader saw it (each reader's
    # attach told the session's others of it, so the run starts past those).
    after = next(i for i, e in enumerate(attached[0]) if e.event_id == before[-1].event_id)
    started = next(e for e in attached[0][after + 1 :] if e.message is not None)
    run_first = parse_event_id(started.event_id)
    assert run_first is not None
    assert_whole(events, prompt, run_first[1])
    for seen in attached:
        assert "@resync_required" not in [e.kind for e in seen]
        assert [e.event_id for e in seen[: len(before) - 1]] == [e.event_id for e in before[1:]]
        assert len([t for t in texts(seen) if repr(prompt) in t]) == 2
        assert {e.event_id for e in events} <= {e.event_id for e in seen}


# 60 MiB on Redis is in the under-load test below.
@pytest.mark.parametrize(
    ("mib", "backend"),
    [(m, b) for m in (1, 3, 8, 16) for b in ("memory", "redis")] + [(60, "memory")],
)
async def test_the_reference_stream_and_the_dialect_carry_a_large_prompt_whole(
    serve_process: Callable[..., ServeProcess],
    mib: int,
    backend: str,
    request: pytest.FixtureRequest,
) -> None:
    args: tuple[str, ...] = ()
    if backend == "redis":
        redis: RedisServer = request.getfixturevalue("redis")
        args = ("--redis-url", redis.url)
    await reference_and_dialect_carry(serve_process(*args), prompt_of(mib))


async def reference_and_dialect_carry(server: ServeProcess, prompt: str) -> None:
    """A reference SSE reader of a session sees a task of ``prompt`` whole, and
    a dialect run of it completes with both echoes."""
    base = f"http://{server.http_address}"
    async with httpx.AsyncClient(base_url=base, timeout=300) as http:
        created = await http.post("/api/sessions", json={})
        sid = created.json()["session"]["sessionId"]
        seen: list[Any] = []
        connected = asyncio.Event()

        async def watch() -> None:
            async for item in read_reference(http, f"/api/sessions/{sid}/stream", until_idle=True):
                seen.append(item)
                connected.set()

        watcher = asyncio.create_task(watch())
        await asyncio.wait_for(connected.wait(), 30)
        started = await http.post(f"/api/sessions/{sid}/tasks", json={"prompt": prompt})
        assert started.status_code == 202, started.text
        await asyncio.wait_for(watcher, 300)
        kinds = [item.server_event_kind for item in seen]
        assert "resync_required" not in kinds
        shown = repr(prompt)
        echoed = [t for t in message_texts(i.message for i in seen) if shown in t]
        assert len(echoed) >= 2

        dialect = [e async for e in read_dialect(http, "/v1/runs", {"prompt": prompt})]
    done = dialect[-1].data
    assert done.get("status") == "completed", done
    said = "".join(e.data["delta"] for e in dialect if e.event is DialectEventName.MESSAGE)
    thought = "".join(e.data["text"] for e in dialect if e.event is DialectEventName.THOUGHT)
    assert repr(prompt) in said and repr(prompt) in thought


async def test_ten_reference_readers_each_get_a_16_mib_task_whole(serve: Serve) -> None:
    server = serve()
    prompt = prompt_of(16)
    base = f"http://{server.http_address}"
    async with httpx.AsyncClient(base_url=base, timeout=300) as http:
        created = await http.post("/api/sessions", json={})
        sid = created.json()["session"]["sessionId"]
        connected = [asyncio.Event() for _ in range(10)]

        async def watch(connected: asyncio.Event) -> list[Any]:
            seen: list[Any] = []
            async for item in read_reference(http, f"/api/sessions/{sid}/stream", until_idle=True):
                seen.append(item)
                connected.set()
            return seen

        watchers = [asyncio.create_task(watch(c)) for c in connected]
        await asyncio.wait_for(asyncio.gather(*(c.wait() for c in connected)), 60)
        started = await http.post(f"/api/sessions/{sid}/tasks", json={"prompt": prompt})
        assert started.status_code == 202, started.text
        views = await asyncio.wait_for(asyncio.gather(*watchers), 300)
    for seen in views:
        assert "resync_required" not in [item.server_event_kind for item in seen]
        assert len([i for i in seen if i.message is not None and repr(prompt) in i.data]) >= 2
    # The session was new: every message any reader saw is the task's, and all
    # ten saw the same ones, in the same order, under the same ids.
    messages = [[i.event_id for i in seen if i.message is not None] for seen in views]
    assert messages[0] and all(ids == messages[0] for ids in messages)
    seqs = [parse_event_id(event_id) for event_id in messages[0]]
    assert all(s is not None for s in seqs)
    assert [s[1] for s in seqs if s] == sorted({s[1] for s in seqs if s})


async def test_60_mib_on_redis_under_load_reaches_every_transport_whole(
    redis: RedisServer, serve_process: Callable[..., ServeProcess]
) -> None:
    # Redis with appendfsync always (the deployment guide's setting), and
    # small runs of other sessions on the same replica all along: a 60 MiB
    # message must neither stall them nor be cut off by them, on gRPC, the
    # reference stream and the dialect.
    server = serve_process("--redis-url", redis.url)
    admin: Any = aioredis.Redis.from_url(redis.url)  # replies typed bytes | str
    # Every command is logged (its arguments cut to 128 bytes, with how many
    # more there were): what decides whether one command held Redis for long.
    await admin.config_set("slowlog-log-slower-than", 0)
    await admin.config_set("slowlog-max-len", 1_000_000)
    small, error = await grpc_run(server.grpc_address, "hi")
    assert error is None
    stop = asyncio.Event()
    running = [asyncio.Event() for _ in range(4)]

    async def load(running: asyncio.Event) -> int:
        done = 0
        while not stop.is_set():
            events, error = await grpc_run(server.grpc_address, "hi")
            assert error is None, error
            assert "@resync_required" not in [e.kind for e in events]
            assert len(events) == len(small) and events[-1].is_task_end
            done += 1
            running.set()
        return done

    loaders = [asyncio.create_task(load(r)) for r in running]
    try:
        # Every loader has run once (or one failed: it is raised below).
        every = asyncio.gather(*(r.wait() for r in running))
        started = asyncio.create_task(asyncio.wait_for(every, 120))
        await asyncio.wait([started, *loaders], return_when=asyncio.FIRST_COMPLETED)
        for task in (started, *loaders):
            if task.done():
                task.result()
        prompt = prompt_of(60)
        events, error = await grpc_run(server.grpc_address, prompt)
        assert error is None, error
        assert_whole(events, prompt, 1)
        await reference_and_dialect_carry(server, prompt)
    finally:
        stop.set()
        runs = await asyncio.wait_for(asyncio.gather(*loaders), 300)
        logged = await admin.execute_command("SLOWLOG", "GET", "-1")
        await admin.aclose()
    assert all(n >= 1 for n in runs)
    # No command carried the message whole: its text went 1 MiB per command
    # (before, one script call carried it twice, as JSON and protobuf).
    assert max(command_bytes(entry[3]) for entry in logged) <= 4 * MiB


def command_bytes(args: list[bytes]) -> int:
    """A slowlog entry's arguments' size, counting what the log cut off."""
    size = 0
    for arg in args:
        cut = re.search(rb"\.\.\. \((\d+) more bytes\)$", arg)
        size += len(arg) + (int(cut.group(1)) if cut else 0)
    return size


async def sessions(address: str) -> list[pb.SessionInfo]:
    # A connection of its own: the stalled stream's fills the one it shares.
    options = [("grpc.use_local_subchannel_pool", 1)]
    async with AgentClient(address, options=options) as client:
        return await asyncio.wait_for(client.list_sessions(), 30)


async def test_a_grpc_reader_slowed_past_the_window_is_told_and_never_ends_ok(
    serve: Serve, request: pytest.FixtureRequest
) -> None:
    # A window of 64 KiB and a 30 MiB answer (far more than gRPC's buffers
    # hold): the reader holds the run back for the stall timeout, is let go,
    # and is cut off.
    server = serve("--buffer-bytes", str(64 * 1024), "--engine-opt", "repeat=30")
    prompt = prompt_of(1)
    async with AgentClient(server.grpc_address) as client:
        run = client.run(prompt)
        sid = await run.session()
        events: list[StreamEvent] = []
        error: AgentError | None = None
        stream = aiter(run)
        events.append(await anext(stream))
        # Stop reading until the run is over: it did not wait for this reader
        # for good, so it let it go, and cut it off.
        for _ in range(1200):
            [info] = [i for i in await sessions(server.grpc_address) if i.session_id == sid]
            if info.state == pb.SESSION_STATE_IDLE:
                break
            await asyncio.sleep(0.1)  # polling a condition, not timing
        else:
            pytest.fail("the run never ended while its reader was stalled")
        try:
            async for event in stream:
                events.append(event)
        except AgentError as exc:
            error = exc
    assert "@resync_required" in [e.kind for e in events]
    assert error is not None and error.code == grpc.StatusCode.ABORTED, error
    assert "GetHistory" in error.message and sid in error.message
    # Whatever it missed is in history, whole.
    async with AgentClient(server.grpc_address) as client:
        recorded = [m async for m in client.history(sid)]
    echoed = [m for m in recorded if m.WhichOneof("payload") in ("text", "thinking")]
    assert sum(repr(prompt) in (m.text.text or m.thinking.thinking) for m in echoed) == 2


def log_of(mib: float) -> str:
    """A pasted log: short lines of a few words each (about 150,000 a MiB)."""
    line = "line {:08d}: GET /index.html 200\n"
    return "".join(line.format(n) for n in range(int(mib * MiB) // len(line.format(0))))


async def test_a_large_prompt_of_words_reaches_every_transport_whole(serve: Serve) -> None:
    # Echoed word by word, an 8 MiB log was over a million deltas per run.
    # In runs of whole words it is a few thousand, and still whole.
    server = serve()
    prompt = log_of(8)
    events, error = await grpc_run(server.grpc_address, prompt)
    assert error is None, error
    assert_whole(events, prompt, 1)
    assert 2_000 < len(events) < 2 * (4096 + 1) + 100, len(events)
    await reference_and_dialect_carry(server, prompt)


async def test_a_prompt_past_the_record_limit_is_refused_naming_its_size(serve: Serve) -> None:
    server = serve()
    prompt = prompt_of(MAX_MESSAGE_BYTES / MiB + 0.5)
    assert len(prompt) < GRPC_MAX_MESSAGE_BYTES
    events, error = await grpc_run(server.grpc_address, prompt)
    assert events == []
    assert error is not None and error.code == grpc.StatusCode.INVALID_ARGUMENT
    assert str(MAX_MESSAGE_BYTES) in error.message
    [(field, reason)] = error.field_violations
    assert field == "input[0].text" and "bytes of JSON" in reason
    async with httpx.AsyncClient(base_url=f"http://{server.http_address}", timeout=60) as http:
        refused = await http.post("/v1/runs", json={"prompt": prompt})
        assert refused.status_code == 400, refused.text
        # A JSON body past --http-max-body: its size is what is refused (a
        # body of no declared type would be 415 before its size is read).
        too_big = await http.post(
            "/v1/runs",
            content=b"x" * (MAX_MESSAGE_BYTES + 2 * MiB),
            headers={"content-type": "application/json"},
        )
        assert too_big.status_code == 413 and str(MAX_MESSAGE_BYTES + MiB) in too_big.text
