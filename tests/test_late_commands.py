"""A command for a run that arrives after that run ended hits nothing (#43
item 2), with two replicas on one redis-server.

Replica B is a real ``serve`` process; replica A is the runtime's own
command sender (``Commands`` over a Redis backend) in the test, as another
replica's Abort RPC would run it. A's abort for run 1 reads run 1's owner
and lease token, and the network then holds it (the test delays the send)
until run 1 has ended and run 2 of the same session runs on B. It must not
abort run 2: B drops it because run 2 holds another token. A's abort for
run 2, sent after it on the same inbox, is the one run 2 ends with.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import grpc
from conftest import ServeProcess
from redis_server import RedisServer

from omni_grpc.runtime.commands import Commands
from omni_grpc.runtime.control_channel import Command
from omni_grpc.runtime.redis import redis_backend
from omni_grpc.vocabulary import AbortKind
from omni_grpc_proto.omni.v1 import agent_service_pb2 as pb
from omni_grpc_proto.omni.v1 import agent_service_pb2_grpc

WAIT = 60.0  # a safety net against hangs, never the thing a test checks


async def until_asked(call: grpc.aio.UnaryStreamCall) -> str:  # type: ignore[type-arg]
    """Reads a Run until its tool call waits for approval; the session id."""
    async for response in call:
        if response.event.WhichOneof("kind") == "approval_request":
            return str(response.session_id)
    raise AssertionError("the run ended without asking for approval")


async def abort_reason(call: grpc.aio.UnaryStreamCall) -> str:  # type: ignore[type-arg]
    """Reads a Run to its end; the reason of the abort it ended with."""
    reasons = [r.message.abort.reason async for r in call if r.message.HasField("abort")]
    assert len(reasons) == 1, reasons
    return reasons[0]


async def test_an_abort_delivered_after_its_run_ended_does_not_abort_the_next_run(
    serve_process: Callable[..., ServeProcess], redis: RedisServer, tmp_path: Path
) -> None:
    replica_b = serve_process(
        "--redis-url", redis.url, "--data-dir", str(tmp_path / "shared"),
        "--approval-mode", "ask", "--no-http",
    )  # fmt: skip
    backend_a = redis_backend(redis.url)
    replica_a = Commands(backend_a, {}, {})
    held: list[tuple[str, Command]] = []
    in_flight = asyncio.Event()
    delivered = asyncio.Event()
    send = backend_a.control.send

    async def late_send(owner: str, command: Command) -> None:
        if not held:  # the first command: held by the network until released
            held.append((owner, command))
            in_flight.set()
            await delivered.wait()
        await send(owner, command)

    backend_a.control.send = late_send  # type: ignore[method-assign]
    try:
        async with grpc.aio.insecure_channel(replica_b.grpc_address) as channel:
            stub = agent_service_pb2_grpc.AgentServiceStub(channel)
            run_1 = stub.Run(pb.RunRequest(prompt="list the workspace"))
            session_id = await asyncio.wait_for(until_asked(run_1), WAIT)

            late = asyncio.create_task(
                replica_a.abort(session_id, "late abort for run 1", AbortKind.USER)
            )
            await asyncio.wait_for(in_flight.wait(), WAIT)
            [(owner, command)] = held
            assert command.kind == "abort" and command.token > 0

            # Run 1 ends (aborted on B itself), and run 2 starts on B.
            await stub.Abort(pb.AbortRequest(session_id=session_id, reason="run 1 ends"))
            assert await asyncio.wait_for(abort_reason(run_1), WAIT) == "run 1 ends"
            run_2 = stub.Run(pb.RunRequest(session_id=session_id, prompt="list the workspace"))
            await asyncio.wait_for(until_asked(run_2), WAIT)
            found = await backend_a.leases.owner(session_id)
            assert found is not None and found.replica == owner
            assert found.token > command.token  # run 2 holds a newer token

            # The late abort for run 1 reaches B now, then an abort for run 2
            # on the same inbox, in order: run 2 ends with the second.
            delivered.set()
            assert await asyncio.wait_for(late, WAIT)
            assert await replica_a.abort(session_id, "abort for run 2", AbortKind.USER)
            assert await asyncio.wait_for(abort_reason(run_2), WAIT) == "abort for run 2"
    finally:
        await backend_a.aclose()
