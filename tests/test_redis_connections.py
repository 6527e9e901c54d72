"""A replica's Redis connections are bounded by design, not by its load.

Real processes: a ``serve --redis-url`` subprocess on a redis-server of the
test's own, whose ``maxclients`` is set low: a replica that opened a
connection per watched session would be refused by Redis itself and its runs
would fail. Every wait is on a condition; the timeouts only stop a hang.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest
import redis.asyncio as aioredis
from conftest import ServeProcess
from grpc_health.v1 import health_pb2, health_pb2_grpc
from redis_server import RedisServer

from omni_grpc import protocol
from omni_grpc.convert import message_from_dict
from omni_grpc.engines.demo import DemoEngine
from omni_grpc.runtime.errors import BackendUnavailable
from omni_grpc.runtime.hub import Hub
from omni_grpc.runtime.interface import RunRequest
from omni_grpc.runtime.limits import Limits
from omni_grpc.runtime.redis import redis_backend
from omni_grpc_proto.omni.v1 import agent_service_pb2 as pb
from omni_grpc_proto.omni.v1 import agent_service_pb2_grpc

WAIT = 120.0  # a safety net against hangs, never the thing a test checks
# What one replica may hold, whatever its load: the command pool, the read
# pool, the stream reader and the control inbox, with room for the test's own
# client and the health probe.
MAX_CLIENTS = 48


IDLE = pb.SESSION_STATE_IDLE


def hello() -> RunRequest:
    return RunRequest(input=[message_from_dict(protocol.user_text("hi"))])


def is_idle_end(response: pb.RunResponse) -> bool:
    return (
        response.WhichOneof("kind") == "event"
        and response.event.WhichOneof("kind") == "task_state"
        and response.event.task_state.state == pb.SESSION_STATE_IDLE
    )


async def one_run(stub: agent_service_pb2_grpc.AgentServiceStub) -> tuple[str, list[str]]:
    """A run read to its end: its status and the kinds of what it saw."""
    kinds: list[str] = []
    try:
        async for response in stub.Run(pb.RunRequest(prompt="hello there")):
            kind = response.WhichOneof("kind")
            kinds.append(
                response.message.WhichOneof("payload")
                if kind == "message"
                else response.event.WhichOneof("kind")
            )
            if is_idle_end(response):
                return "OK", kinds
    except grpc.aio.AioRpcError as exc:
        return f"{exc.code().name}: {exc.details()}", kinds
    return "ENDED_EARLY", kinds


async def test_many_concurrent_sessions_fit_in_a_bounded_number_of_connections(
    serve_process: Callable[..., ServeProcess], redis: RedisServer, tmp_path: Path
) -> None:
    admin = aioredis.Redis.from_url(redis.url)
    await admin.config_set("maxclients", MAX_CLIENTS)
    server = serve_process(
        "--redis-url", redis.url, "--data-dir", str(tmp_path / "data"),
        "--no-http", "--pacing", "0.02", "--max-runs", "1000", "--max-loop-busy", "0",
    )  # fmt: skip
    sessions = 150
    async with grpc.aio.insecure_channel(server.grpc_address) as channel:
        stub = agent_service_pb2_grpc.AgentServiceStub(channel)
        results = await asyncio.wait_for(
            asyncio.gather(*(one_run(stub) for _ in range(sessions))), WAIT
        )
        # Finished sessions hold no reader: one blocked stream reader and one
        # control inbox per replica, whatever ran before.
        clients = await admin.info("clients")
    statuses = [status for status, _ in results]
    assert statuses == ["OK"] * sessions, sorted(set(statuses))
    assert all("abort" not in kinds for _, kinds in results)
    # The demo engine says the same to the same prompt: every run saw all of it.
    first = results[0][1]
    assert first.count("request_end") == 2 and first.count("partial_text") > 10
    assert [kinds for _, kinds in results if kinds != first] == []
    assert clients["blocked_clients"] <= 2, clients
    assert clients["connected_clients"] <= MAX_CLIENTS
    await admin.aclose()


async def test_a_run_refused_by_the_store_leaves_no_session_behind(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    """A Run that creates its session and then cannot claim it (the store
    refused) answers UNAVAILABLE and leaves nothing counted against
    ``--max-sessions``."""
    backend = redis_backend(redis_server.url, prefix=f"refused-{tmp_path.name}:")
    hub = Hub(DemoEngine(), tmp_path / "data", backend=backend, limits=Limits(max_sessions=1))

    async def refused(session_id: str, owner: str, *, new: bool = False) -> None:
        raise BackendUnavailable("MaxConnectionsError: too many connections")

    # A run takes its session with ``claim`` (the lease and the session's
    # lifecycle in one step): that is the call the store refuses.
    claim = backend.leases.claim
    backend.leases.claim = refused  # type: ignore[method-assign]
    try:
        for _ in range(3):
            with pytest.raises(BackendUnavailable):
                await hub.run(hello())
        assert await backend.index.list() == []
    finally:
        backend.leases.claim = claim  # type: ignore[method-assign]
    # The one session the limit allows is still there to be made.
    session_id, sub = await hub.run(hello())
    async for event in sub:
        ev = event.server_event
        if ev is not None and ev.HasField("task_state") and ev.task_state.state == IDLE:
            break
    assert [r.session_id for r in await backend.index.list()] == [session_id]
    await hub.shutdown()
    await backend.aclose()


async def until_serving(channel: grpc.aio.Channel, status: int) -> None:
    health = health_pb2_grpc.HealthStub(channel)

    async def poll() -> None:
        while (await health.Check(health_pb2.HealthCheckRequest())).status != status:
            await asyncio.sleep(0.05)

    await asyncio.wait_for(poll(), WAIT)


async def test_after_a_redis_restart_every_pooled_connection_is_replaced(
    serve_process: Callable[..., ServeProcess], redis: RedisServer, tmp_path: Path
) -> None:
    """Connections pooled before Redis restarted are dead: a replica finds
    that out before it sends a command on one, so no run after the restart
    fails with "Connection closed by server"."""
    server = serve_process(
        "--redis-url", redis.url, "--data-dir", str(tmp_path / "data"),
        "--no-http", "--pacing", "0.01", "--max-runs", "1000", "--max-loop-busy", "0",
    )  # fmt: skip
    burst = 90
    async with grpc.aio.insecure_channel(server.grpc_address) as channel:
        stub = agent_service_pb2_grpc.AgentServiceStub(channel)
        # Fills the pools: every connection is used, then idle in its pool.
        before = await asyncio.wait_for(
            asyncio.gather(*(one_run(stub) for _ in range(burst))), WAIT
        )
        assert [status for status, _ in before] == ["OK"] * burst
        redis.kill()
        await until_serving(channel, health_pb2.HealthCheckResponse.NOT_SERVING)
        redis.start()  # same port, same AOF
        await until_serving(channel, health_pb2.HealthCheckResponse.SERVING)
        for _round in range(2):
            after = await asyncio.wait_for(
                asyncio.gather(*(one_run(stub) for _ in range(burst))), WAIT
            )
            statuses = [status for status, _ in after]
            assert statuses == ["OK"] * burst, sorted(set(statuses))
            odd = [kinds for _, kinds in after if kinds != before[0][1]]
            assert odd == [], (before[0][1], odd[:2])
