"""A paused owner's clients are told what happened (#30 item 6).

Real processes: two ``serve --redis-url`` replicas on one redis-server. A run
on replica A waits for an approval; a client watches it on A (its Run and an
Attach) and one on B. A is stopped with SIGSTOP: within the owner-loss bound
B takes the run over, and B's client gets the close, whose abort names the
replica that stopped renewing its lease and the one that took the run over.
A goes on (SIGCONT) after its blocking reads timed out: its own clients get
the same close from the log, not "the session store is unavailable:
TimeoutError".
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc
import pytest
from redis_server import RedisServer

from omni_grpc.runtime.redis.connection import BLOCK_MS, COMMAND_TIMEOUT
from omni_grpc_proto.omni.v1 import agent_service_pb2 as pb
from omni_grpc_proto.omni.v1 import agent_service_pb2_grpc

WAIT = 120.0  # a safety net against hangs, never the thing a test checks
OWNER_LOSS = 4.0
# What a loaded CI machine may add to the owner-loss bound (as
# tests/test_durable_chaos.py allows).
SCHEDULING = 5.0
# How long A stays stopped after B's client was told: past the socket timeout
# of its blocking reads, the case that answered TimeoutError. The fault's
# length, not a wait for a condition.
PAUSE = BLOCK_MS / 1000 + COMMAND_TIMEOUT + 1.0
REASON = re.compile(
    r"^the replica running the session was lost: replica (\S+) stopped renewing its run"
    r" lease, last renewed [0-9.]+ s before; replica (\S+) took the run over$"
)


def start_replica(redis_url: str, data: Path, log: Path) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        [
            sys.executable, "-m", "omni_grpc", "serve", "--grpc-port", "0", "--no-http",
            "--redis-url", redis_url, "--data-dir", str(data), "--approval-mode", "ask",
            "--owner-loss-timeout", str(OWNER_LOSS),
            # The close path: the paused owner's run is closed, not resumed.
            "--resume-runs", "0",
        ],
        stdout=subprocess.PIPE, stderr=log.open("w"), text=True,
    )  # fmt: skip
    assert process.stdout is not None
    address = ""
    for line in process.stdout:
        if "gRPC on grpc://" in line:
            address = line.split("grpc://", 1)[1].split()[0]
        if line.strip() == "omni-grpc ready":
            return process, address
    raise AssertionError(f"serve exited ({process.wait()}) before it was ready")


@pytest.fixture
def replicas(
    redis: RedisServer, tmp_path: Path
) -> Iterator[list[tuple[subprocess.Popen[str], str]]]:
    started = [
        start_replica(redis.url, tmp_path / "data", tmp_path / f"{name}.log") for name in "AB"
    ]
    yield started
    for process, _ in started:
        os.kill(process.pid, signal.SIGCONT)  # a failed test may leave it stopped
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


Response = pb.RunResponse | pb.AttachResponse


async def rest_of(call: grpc.aio.UnaryStreamCall) -> AsyncIterator[pb.RunResponse]:
    """A call's responses after one already taken with ``read()`` (gRPC
    refuses ``async for`` on a call once ``read()`` was used)."""
    while (response := await call.read()) is not grpc.aio.EOF:
        assert isinstance(response, pb.RunResponse)
        yield response


class Client:
    """One stream's messages, events and how it ended."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.got: list[Response] = []
        self.error: grpc.aio.AioRpcError | None = None
        self.told_at: float | None = None
        self.changed = asyncio.Event()

    async def follow(self, responses: object) -> None:
        try:
            async for response in responses:  # type: ignore[attr-defined]
                self.got.append(response)
                if self.abort() is not None and self.told_at is None:
                    self.told_at = time.monotonic()
                self.changed.set()
                if self.idle_after_abort():
                    return
        except grpc.aio.AioRpcError as exc:
            self.error = exc
        self.changed.set()

    def kinds(self) -> list[str]:
        return [
            r.message.WhichOneof("payload")
            if r.WhichOneof("kind") == "message"
            else r.event.WhichOneof("kind")
            for r in self.got
        ]

    def abort(self) -> pb.RunResponse | None:
        for r in self.got:
            if r.WhichOneof("kind") == "message" and r.message.WhichOneof("payload") == "abort":
                return r
        return None

    def idle_after_abort(self) -> bool:
        aborted = False
        for r in self.got:
            if r.WhichOneof("kind") == "message" and r.message.WhichOneof("payload") == "abort":
                aborted = True
            elif (
                aborted
                and r.WhichOneof("kind") == "event"
                and r.event.WhichOneof("kind") == "task_state"
                and r.event.task_state.state == pb.SESSION_STATE_IDLE
            ):
                return True
        return False

    async def until(self, done: object) -> None:
        while not done():  # type: ignore[operator]
            assert self.error is None, (self.name, self.error)
            self.changed.clear()
            await self.changed.wait()


async def test_a_paused_owners_clients_are_told_whose_run_was_taken_over(
    replicas: list[tuple[subprocess.Popen[str], str]],
) -> None:
    (a, a_address), (_b, b_address) = replicas
    async with (
        grpc.aio.insecure_channel(a_address) as on_a,
        grpc.aio.insecure_channel(b_address) as on_b,
    ):
        stub_a = agent_service_pb2_grpc.AgentServiceStub(on_a)
        stub_b = agent_service_pb2_grpc.AgentServiceStub(on_b)
        run = Client("Run on A")
        call = stub_a.Run(pb.RunRequest(prompt="list the workspace"))
        first = await asyncio.wait_for(call.read(), WAIT)
        assert isinstance(first, pb.RunResponse)
        run.got.append(first)
        session, after = first.session_id, first.event_id
        attach_a, attach_b = Client("Attach on A"), Client("Attach on B")
        clients = [run, attach_a, attach_b]
        tasks = [
            asyncio.create_task(run.follow(rest_of(call))),
            asyncio.create_task(
                attach_a.follow(
                    stub_a.Attach(pb.AttachRequest(session_id=session, after_event_id=after))
                )
            ),
            asyncio.create_task(
                attach_b.follow(
                    stub_b.Attach(pb.AttachRequest(session_id=session, after_event_id=after))
                )
            ),
        ]
        try:
            # The run waits for its approval: every client has seen the ask.
            for client in clients:
                await asyncio.wait_for(
                    client.until(lambda c=client: "approval_request" in c.kinds()), WAIT
                )
            stopped = time.monotonic()
            os.kill(a.pid, signal.SIGSTOP)
            await asyncio.wait_for(attach_b.until(attach_b.idle_after_abort), WAIT)
            assert attach_b.told_at is not None
            assert attach_b.told_at - stopped <= OWNER_LOSS + SCHEDULING, attach_b.told_at - stopped
            await asyncio.sleep(PAUSE)  # the fault's length (see PAUSE)
            os.kill(a.pid, signal.SIGCONT)
            for client in (run, attach_a):
                await asyncio.wait_for(client.until(client.idle_after_abort), WAIT)
        finally:
            os.kill(a.pid, signal.SIGCONT)
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    reasons = set()
    for client in clients:
        assert client.error is None, (client.name, client.error)
        told = client.abort()
        assert told is not None, client.name
        reasons.add(told.message.abort.reason)
    # Every client was told the same story, naming both replicas: the one
    # that stopped (A: its pid is in its name) and the one that took over.
    [reason] = reasons
    match = REASON.match(reason)
    assert match is not None, reason
    stopped_replica, taker = match.groups()
    assert f"-{a.pid}-" in stopped_replica, (stopped_replica, a.pid)
    assert taker != stopped_replica
