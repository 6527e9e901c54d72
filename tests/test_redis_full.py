"""A full Redis is an unavailable Redis: with ``maxmemory`` reached (the
``noeviction`` policy the backend needs), runs are refused with UNAVAILABLE
naming the cause, health is NOT_SERVING while it lasts and SERVING again
after, and other error replies that mean "cannot serve now" map the same way.

Real processes: ``serve --redis-url`` on a redis-server of the test's own.
Every wait is on a condition; the timeouts only stop a hang.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import grpc
import httpx
import pytest
import redis.asyncio as aioredis
from conftest import ServeProcess
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import given
from hypothesis import strategies as st
from redis import exceptions as redis_errors
from redis_server import RedisServer

from omni_grpc.runtime.errors import BackendUnavailable
from omni_grpc.runtime.recovery import BACKEND_LOST_REASON
from omni_grpc.runtime.redis.connection import unavailable_on_failure
from omni_grpc_proto.omni.v1 import agent_service_pb2 as pb
from omni_grpc_proto.omni.v1 import agent_service_pb2_grpc

WAIT = 60.0


async def health_is(address: str, status: int) -> None:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while True:
            reply = await stub.Check(health_pb2.HealthCheckRequest(service=""))
            if reply.status == status:
                return
            await asyncio.sleep(0.05)  # polling a condition


async def run_status(address: str) -> tuple[grpc.StatusCode, str]:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = agent_service_pb2_grpc.AgentServiceStub(channel)
        try:
            async for _ in stub.Run(pb.RunRequest(prompt="hello there")):
                pass
        except grpc.aio.AioRpcError as exc:
            return exc.code(), exc.details() or ""
    return grpc.StatusCode.OK, ""


async def test_a_full_redis_is_unavailable_and_not_serving_until_it_has_room(
    redis: RedisServer, serve_process: Callable[..., ServeProcess]
) -> None:
    server = serve_process("--redis-url", redis.url)
    assert await run_status(server.grpc_address) == (grpc.StatusCode.OK, "")
    admin = aioredis.Redis.from_url(redis.url)
    try:
        await admin.config_set("maxmemory", 1)  # far below what it holds
        await asyncio.wait_for(
            health_is(server.grpc_address, health_pb2.HealthCheckResponse.NOT_SERVING), WAIT
        )
        code, details = await asyncio.wait_for(run_status(server.grpc_address), WAIT)
        assert code == grpc.StatusCode.UNAVAILABLE, (code, details)
        assert "out of memory" in details, details
        async with httpx.AsyncClient(base_url=f"http://{server.http_address}") as http:
            created = await http.post("/api/sessions", json={})
            assert created.status_code == 503, created.text
            assert "out of memory" in created.text
        await admin.config_set("maxmemory", 0)
        await asyncio.wait_for(
            health_is(server.grpc_address, health_pb2.HealthCheckResponse.SERVING), WAIT
        )
        assert await run_status(server.grpc_address) == (grpc.StatusCode.OK, "")
    finally:
        await admin.config_set("maxmemory", 0)
        await admin.aclose()


REFUSING = [
    redis_errors.OutOfMemoryError("command not allowed when used memory > 'maxmemory'."),
    redis_errors.ReadOnlyError("You can't write against a read only replica."),
    redis_errors.ResponseError("MISCONF Redis is configured to save RDB snapshots"),
    redis_errors.ResponseError("BUSY Redis is busy running a script."),
    redis_errors.ResponseError("NOREPLICAS Not enough good replicas to write."),
    redis_errors.ResponseError(
        "ERR Error running script (call to f_1): @user_script:3: "
        "OOM command not allowed when used memory > 'maxmemory'."
    ),
]


@pytest.mark.parametrize("error", REFUSING, ids=lambda e: str(e)[:16])
def test_every_cannot_serve_reply_is_backend_unavailable(error: Exception) -> None:
    with pytest.raises(BackendUnavailable), unavailable_on_failure():
        raise error


@given(st.text(min_size=1).filter(lambda t: "OOM command not allowed" not in t))
def test_other_error_replies_stay_errors_of_ours(text: str) -> None:
    # A reply whose first word is no refusal is a bug in a command of ours.
    words = {"OOM", "LOADING", "MISCONF", "READONLY", "BUSY", "MASTERDOWN",
             "NOREPLICAS", "CLUSTERDOWN", "TRYAGAIN",
             # A Cluster node's redirections: the URL names no standalone primary.
             "MOVED", "ASK", "CROSSSLOT"}  # fmt: skip
    error = redis_errors.ResponseError(text)
    if text.split(" ", 1)[0] in words:
        with pytest.raises(BackendUnavailable), unavailable_on_failure():
            raise error
    else:
        with pytest.raises(redis_errors.ResponseError), unavailable_on_failure():
            raise error


async def test_a_run_that_meets_a_full_redis_stops_and_is_closed_once_redis_has_room(
    redis: RedisServer, tmp_path: Path
) -> None:
    """A run in progress when Redis fills up stops (its trace records why),
    and its client, whose stream stays open (reads still work), gets the
    close once Redis has room: the abort, then ``task_state idle``."""
    log_path = tmp_path / "serve.log"
    process = subprocess.Popen(
        [sys.executable, "-m", "omni_grpc", "serve", "--grpc-port", "0", "--no-http",
         "--redis-url", redis.url, "--data-dir", str(tmp_path / "data"), "--pacing", "0.1",
         "--owner-loss-timeout", "4"],
        stdout=subprocess.PIPE, stderr=log_path.open("w"), text=True,
    )  # fmt: skip
    admin = aioredis.Redis.from_url(redis.url)
    try:
        assert process.stdout is not None
        address = ""
        for line in process.stdout:
            if "gRPC on grpc://" in line:
                address = line.split("grpc://", 1)[1].split()[0]
            if line.strip() == "omni-grpc ready":
                break

        async def failed() -> None:
            while "run failed" not in log_path.read_text():
                await asyncio.sleep(0.05)  # polling a condition (the server's log)

        seen: list[pb.RunResponse] = []
        async with grpc.aio.insecure_channel(address) as channel:
            stub = agent_service_pb2_grpc.AgentServiceStub(channel)

            async def read() -> None:
                async for response in stub.Run(pb.RunRequest(prompt="a paced answer")):
                    seen.append(response)
                    if len(seen) == 5:
                        await admin.config_set("maxmemory", 1)
                        await asyncio.wait_for(failed(), WAIT)
                        await admin.config_set("maxmemory", 0)

            await asyncio.wait_for(read(), WAIT)
        kinds = [
            r.message.WhichOneof("payload") if r.WhichOneof("kind") == "message"
            else r.event.WhichOneof("kind")
            for r in seen
        ]  # fmt: skip
        assert kinds[-2:] == ["abort", "task_state"], kinds
        assert seen[-2].message.abort.reason == BACKEND_LOST_REASON
        assert seen[-1].event.task_state.state == pb.SESSION_STATE_IDLE
        [trace] = (tmp_path / "data" / "traces").glob("*/*.jsonl")
        aborts = [
            json.loads(line)["payload"]
            for line in trace.read_text().splitlines()
            if '"abort"' in line
        ]
        assert [a["reason"] for a in aborts] == [BACKEND_LOST_REASON]
    finally:
        await admin.config_set("maxmemory", 0)
        await admin.aclose()
        process.terminate()
        process.wait(15)
