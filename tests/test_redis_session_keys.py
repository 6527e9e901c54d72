"""A deleted or expired session leaves nothing behind in Redis (#30 item 8).

Real processes: ``serve --redis-url --session-ttl`` on a redis-server of the
test's own. Each session runs a task whose tool call is approved (so its
approval keys were made too). One session is deleted with DeleteSession, the
other expires by ``--session-ttl``; after each, no key of Redis names the
session, and no set or hash of Redis holds it as a member or a field. The
keys a live session holds are checked first, so the check is not vacuous.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import grpc
import redis.asyncio as aioredis
from conftest import ServeProcess
from redis_server import RedisServer

from omni_grpc_proto.omni.v1 import agent_service_pb2 as pb
from omni_grpc_proto.omni.v1 import agent_service_pb2_grpc, omni_pb2

WAIT = 120.0  # a safety net against hangs, never the thing a test checks
SESSION_TTL = 3.0


async def approved_run(stub: agent_service_pb2_grpc.AgentServiceStub) -> str:
    """A run whose tool call is asked about and allowed, read to its end."""
    session_id = ""
    async for response in stub.Run(pb.RunRequest(prompt="list the workspace")):
        session_id = response.session_id
        if response.WhichOneof("kind") != "event":
            continue
        event = response.event
        if event.WhichOneof("kind") == "approval_request":
            call = event.approval_request.tool_call.tool_call
            await stub.Approve(
                pb.ApproveRequest(
                    session_id=session_id,
                    tool_call_id=call.tool_call_id,
                    decision=omni_pb2.DECISION_ALLOW,
                )
            )
        elif (
            event.WhichOneof("kind") == "task_state"
            and event.task_state.state == pb.SESSION_STATE_IDLE
        ):
            return session_id
    raise AssertionError("the run ended without task_state idle")


async def traces_of(admin: aioredis.Redis, session_id: str) -> list[str]:
    """Every place Redis holds ``session_id``: a key's name, a set's member,
    a hash's field or value."""
    found = []
    needle = session_id.encode()
    async for key in admin.scan_iter(count=1000):
        if needle in key:
            found.append(f"key {key!r}")
            continue
        kind = (await admin.type(key)).decode()
        if kind == "set":
            if await admin.sismember(key, session_id):
                found.append(f"member of {key!r}")
        elif kind == "hash":
            for field, value in (await admin.hgetall(key)).items():
                if needle in field or needle in value:
                    found.append(f"field of {key!r}")
    return found


async def test_a_deleted_or_expired_session_leaves_no_key_in_redis(
    redis: RedisServer, serve_process: Callable[..., ServeProcess], tmp_path: Path
) -> None:
    server = serve_process(
        "--redis-url", redis.url, "--data-dir", str(tmp_path / "data"), "--no-http",
        "--approval-mode", "ask", "--session-ttl", str(SESSION_TTL),
    )  # fmt: skip
    admin = aioredis.Redis.from_url(redis.url)
    try:
        async with grpc.aio.insecure_channel(server.grpc_address) as channel:
            stub = agent_service_pb2_grpc.AgentServiceStub(channel)
            deleted = await asyncio.wait_for(approved_run(stub), WAIT)
            # Live, a session holds keys (its record, events, fence...) and
            # is a member of the index: the check below can find them.
            held = await traces_of(admin, deleted)
            assert any(place.startswith("key") for place in held), held
            assert any(place.startswith("member") for place in held), held
            await stub.DeleteSession(pb.DeleteSessionRequest(session_id=deleted))
            assert await traces_of(admin, deleted) == []

            expired = await asyncio.wait_for(approved_run(stub), WAIT)
            assert await traces_of(admin, expired) != []

            async def until_expired() -> None:
                while any(
                    s.session_id == expired
                    for s in (await stub.ListSessions(pb.ListSessionsRequest())).sessions
                ):
                    await asyncio.sleep(0.2)  # polling a condition

            await asyncio.wait_for(until_expired(), WAIT)
            assert await traces_of(admin, expired) == []
    finally:
        await admin.aclose()
