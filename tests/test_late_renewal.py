"""A replica whose lease renewals come late (its command pool queued behind
load) never fences its own live run: its sweep finds the run without a lease,
sees that it runs it itself, and renews it instead of taking it over.

Real redis-server; the lateness is injected by stopping the run's renewal
task, which is what a renewal stuck behind the load looks like from Redis.
Every wait is on a condition; the timeouts only stop a hang.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest
import redis.asyncio as aioredis
from redis_server import RedisServer

from omni_grpc import protocol
from omni_grpc.convert import message_from_dict
from omni_grpc.engines.demo import DemoEngine
from omni_grpc.runtime.hub import Hub, RunRequest
from omni_grpc.runtime.redis import redis_backend
from omni_grpc.runtime.run import Run
from omni_grpc.vocabulary import ApprovalMode

WAIT = 60.0


def kind(data: bytes) -> str:
    body = orjson.loads(data)
    if "payload" in body:
        return str(body["payload"].get("type", "session_meta"))
    return f"@{body['type']}" + (f":{body['state']}" if "state" in body else "")


async def test_a_run_renewed_late_is_renewed_by_its_own_sweep_not_fenced(
    redis_server: RedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prefix = f"late-{tmp_path.name}:"
    backend = redis_backend(redis_server.url, prefix=prefix, owner_loss_timeout=1.0)
    hub = Hub(DemoEngine(), tmp_path / "data", backend=backend)

    async def stuck(run: Run) -> None:
        await asyncio.Event().wait()  # a renewal that never gets a connection

    monkeypatch.setattr(hub.tasks, "_renew", stuck)
    admin = aioredis.Redis.from_url(redis_server.url)
    await hub.start()
    try:
        request = RunRequest(
            input=[message_from_dict(protocol.user_text("hi"))], approval_mode=ApprovalMode.ASK
        )
        session_id, sub = await hub.run(request)
        kinds: list[str] = []
        ask = None
        while ask is None:
            event = await asyncio.wait_for(sub.next(), WAIT)
            assert event is not None
            kinds.append(kind(event.data))
            if kinds[-1] == "@approval_request":
                ask = orjson.loads(event.data)["toolCall"]["payload"]["tool_call_id"]
        lease = f"{prefix}{{{session_id}}}:lease"

        async def lease_is(present: bool) -> None:
            while bool(await admin.exists(lease)) != present:
                await asyncio.sleep(0.02)  # polling a condition

        # The lease runs out (nothing renews it), then the sweep finds the run.
        await asyncio.wait_for(lease_is(False), WAIT)
        await asyncio.wait_for(lease_is(True), WAIT)
        await hub.approve(session_id, ask, "allow")
        while True:
            event = await asyncio.wait_for(sub.next(), WAIT)
            assert event is not None
            kinds.append(kind(event.data))
            if kinds[-1] == "@task_state:idle" and event.buffered:
                break
        assert "abort" not in kinds, kinds
        assert "tool_call_output" in kinds, kinds
    finally:
        await hub.shutdown()
        await backend.aclose()
        await admin.aclose()
