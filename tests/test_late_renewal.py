"""A replica whose lease renewals come late never fences its own live run:
its sweep finds the run without a lease, sees that it holds it itself, and
leaves it to its keeper; the run's writes wait for the keeper's next answer
instead of giving the run up.

Real redis-server; the lateness is injected by stalling the keeper thread's
renewal rounds, which is what a starved renewal (or a Redis slow to answer)
looks like from Redis. Every wait is on a condition; the timeouts only stop
a hang.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis.asyncio as aioredis
from redis_server import RedisServer

from omni_grpc import protocol
from omni_grpc.convert import message_from_dict
from omni_grpc.engines.demo import DemoEngine
from omni_grpc.runtime.hub import Hub, RunRequest
from omni_grpc.runtime.redis import redis_backend
from omni_grpc.runtime.run_lease import Lease
from omni_grpc.vocabulary import ApprovalMode

WAIT = 60.0


def kind(data: bytes) -> str:
    body = orjson.loads(data)
    if "payload" in body:
        return str(body["payload"].get("type", "session_meta"))
    return f"@{body['type']}" + (f":{body['state']}" if "state" in body else "")


async def test_a_run_renewed_late_is_kept_not_fenced_by_its_own_sweep(
    redis_server: RedisServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    prefix = f"late-{tmp_path.name}:"
    backend = redis_backend(redis_server.url, prefix=prefix, owner_loss_timeout=1.0)
    hub = Hub(DemoEngine(), tmp_path / "data", backend=backend)
    go_on = threading.Event()
    renew = backend.leases.renew_many_blocking

    def late(leases: list[Lease]) -> list[Lease | None]:
        go_on.wait(WAIT)  # a round whose answer is late, by several TTLs
        return renew(leases)

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

        # The lease runs out (its renewal is stalled) and stays out for
        # several sweeps, then the renewal answers and puts it back.
        monkeypatch.setattr(backend.leases, "renew_many_blocking", late)
        await asyncio.wait_for(lease_is(False), WAIT)
        sweeps = 0
        open_runs = backend.leases.open_runs

        async def counted() -> Any:
            nonlocal sweeps
            sweeps += 1
            return await open_runs()

        monkeypatch.setattr(backend.leases, "open_runs", counted)
        while sweeps < 6:
            await asyncio.sleep(0.02)  # polling a condition
        go_on.set()
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
        # The replica's log says its renewals lapsed (the one sign of why
        # another replica might take its runs over); logged by the keeper's
        # thread once that round's answer is in, before the run went on.
        assert "run lease renewals lapsed for" in caplog.text
    finally:
        go_on.set()
        await hub.shutdown()
        await backend.aclose()
        await admin.aclose()


async def test_a_claim_slow_to_become_a_run_is_kept_not_released_by_the_sweep(
    redis_server: RedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under load the step between the claim and the task's start (opening
    the run's stream) can outlast the lease: the lease is renewed from the
    claim on, so the sweep neither releases the claim as a run that never
    started nor fences the run that follows."""
    prefix = f"claim-{tmp_path.name}:"
    backend = redis_backend(redis_server.url, prefix=prefix, owner_loss_timeout=1.0)
    hub = Hub(DemoEngine(), tmp_path / "data", backend=backend)
    rounds = 0
    renew_many = backend.leases.renew_many_blocking

    def counted(leases: list[Lease]) -> list[Lease | None]:
        nonlocal rounds
        rounds += 1
        return renew_many(leases)

    monkeypatch.setattr(backend.leases, "renew_many_blocking", counted)
    open_stream = hub.streams.open

    async def slow_open(session_id: str, subscribing: Any) -> Any:
        # Six renewal rounds (each a quarter of the lease's TTL): the claim's
        # first lease has long run out, and the sweep (every quarter second)
        # has looked at it several times.
        while rounds < 6:
            await asyncio.sleep(0.02)  # polling a condition
        return await open_stream(session_id, subscribing)

    monkeypatch.setattr(hub.streams, "open", slow_open)
    await hub.start()
    try:
        request = RunRequest(input=[message_from_dict(protocol.user_text("hi"))])
        _, sub = await asyncio.wait_for(hub.run(request), WAIT)
        kinds: list[str] = []
        while True:
            event = await asyncio.wait_for(sub.next(), WAIT)
            assert event is not None
            kinds.append(kind(event.data))
            if kinds[-1] == "@task_state:idle" and event.buffered:
                break
        assert rounds >= 6
        assert "abort" not in kinds, kinds
        assert "@task_state:running" in kinds and "tool_call_output" in kinds, kinds
        assert "token_usage" in kinds, kinds
    finally:
        await hub.shutdown()
        await backend.aclose()


async def test_leases_that_ran_out_while_redis_was_down_go_back_to_their_live_owners(
    redis: RedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Redis killed for longer than the owner-loss timeout, then restarted
    on its AOF: every lease ran out by Redis's clock, but the owner is alive.
    Another replica's sweep gives it its grace (the beat must stand still by
    the sweeper's own clock, from an answer after Redis came back), the
    owner renews, and its run goes on to its end with no take-over (#40)."""
    prefix = f"outage-{tmp_path.name}:"
    data = tmp_path / "data"
    owner_backend = redis_backend(redis.url, prefix=prefix, owner_loss_timeout=1.0)
    other_backend = redis_backend(redis.url, prefix=prefix, owner_loss_timeout=1.0)
    owner = Hub(DemoEngine(), data, backend=owner_backend)
    other = Hub(DemoEngine(), data, backend=other_backend)
    admin = aioredis.Redis.from_url(redis.url)
    await owner.start()
    await other.start()
    try:
        request = RunRequest(
            input=[message_from_dict(protocol.user_text("hi"))], approval_mode=ApprovalMode.ASK
        )
        session_id, sub = await owner.run(request)
        kinds: list[str] = []
        ask = None
        last = ""
        while ask is None:  # the run waits on its approval: nothing to write
            event = await asyncio.wait_for(sub.next(), WAIT)
            assert event is not None
            last = event.event_id
            kinds.append(kind(event.data))
            if kinds[-1] == "@approval_request":
                ask = orjson.loads(event.data)["toolCall"]["payload"]["tool_call_id"]
        redis.kill()
        # The fault's own length: twice the owner-loss timeout (not a wait
        # for a condition; nothing can be observed while Redis is down).
        await asyncio.sleep(2.0)
        redis.start()  # same port, same AOF: every lease has run out
        sweeps = 0
        open_runs = other_backend.leases.open_runs

        async def counted() -> Any:
            nonlocal sweeps
            sweeps += 1
            return await open_runs()

        monkeypatch.setattr(other_backend.leases, "open_runs", counted)
        lease = f"{prefix}{{{session_id}}}:lease"
        while not await admin.exists(lease):  # the owner renewed
            await asyncio.sleep(0.02)  # polling a condition
        while sweeps < 8:  # the other replica looked at it for two seconds
            await asyncio.sleep(0.02)  # polling a condition
        await owner.approve(session_id, ask, "allow")
        # The stream ended with Redis (as documented); the client attaches
        # again from the last event it saw.
        sub.close()
        sub = await owner.attach(session_id, last)
        while True:
            event = await asyncio.wait_for(sub.next(), WAIT)
            assert event is not None
            kinds.append(kind(event.data))
            if kinds[-1] == "@task_state:idle" and event.buffered:
                break
        assert "abort" not in kinds, kinds
        assert "tool_call_output" in kinds, kinds
    finally:
        await owner.shutdown()
        await other.shutdown()
        await owner_backend.aclose()
        await other_backend.aclose()
        await admin.aclose()
