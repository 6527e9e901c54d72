"""Load for fault tests: ``CONCURRENCY`` gRPC Runs at a time against one
replica, each started again as soon as it ends, until SIGTERM.

Run as its own process (``python tests/run_load.py ADDRESS CONCURRENCY``) so
that the load's CPU is not the test's: a test timing the replica's health
must not be slowed by its own client. Prints ``ok N`` after every
``CONCURRENCY`` runs that ended well (so a test can wait for the load to be
established, or to go on after a fault), and ``failed N`` likewise for runs
that did not.
"""

from __future__ import annotations

import asyncio
import signal
import sys

import grpc

from omni_grpc_proto.omni.v1 import agent_service_pb2 as pb
from omni_grpc_proto.omni.v1 import agent_service_pb2_grpc


async def one_run(stub: agent_service_pb2_grpc.AgentServiceStub) -> bool:
    try:
        async for response in stub.Run(pb.RunRequest(prompt="hello there")):
            if (
                response.WhichOneof("kind") == "event"
                and response.event.WhichOneof("kind") == "task_state"
                and response.event.task_state.state == pb.SESSION_STATE_IDLE
            ):
                return True
    except grpc.aio.AioRpcError:
        return False
    return False


async def main(address: str, concurrency: int) -> None:
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    counts = {"ok": 0, "failed": 0}

    async def worker(stub: agent_service_pb2_grpc.AgentServiceStub) -> None:
        while not stop.is_set():
            kind = "ok" if await one_run(stub) else "failed"
            counts[kind] += 1
            if counts[kind] % concurrency == 0:
                print(kind, counts[kind], flush=True)
            if kind == "failed":
                await asyncio.sleep(0.1)  # a down replica is not hammered

    async with grpc.aio.insecure_channel(address) as channel:
        stub = agent_service_pb2_grpc.AgentServiceStub(channel)
        workers = [asyncio.create_task(worker(stub)) for _ in range(concurrency)]
        await stop.wait()
        for task in workers:
            task.cancel()
        await asyncio.gather(*workers, return_exceptions=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
