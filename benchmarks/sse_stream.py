"""SSE vs gRPC streaming on loopback: events/s and time to first event.

One in-process server (demo engine, no pacing, a long answer) serves both
transports from the same hub; each transport streams the same kind of run in
turn, in the same process and the same run, so the ratios compare like with
like. Client and server share one event loop and one core, so absolute
figures are lower bounds; the ratios are the point.

    .venv/bin/python benchmarks/sse_stream.py [--repeat 200] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import grpc
import httpx
from httpx_sse import aconnect_sse

from omni_grpc.client.sse import read_reference
from omni_grpc.server import OmniServer, ServerConfig, build_server
from omni_grpc.transport.grpc import GrpcConfig
from omni_grpc.transport.sse.transport import SseConfig, SseTransport
from omni_grpc_proto.omni.v1 import agent_service_pb2 as svc
from omni_grpc_proto.omni.v1 import agent_service_pb2_grpc as svc_grpc

# (events, seconds to the first event, seconds for the whole stream)
Sample = tuple[int, float, float]


async def grpc_run(server: OmniServer, prompt: str) -> Sample:
    assert server.grpc is not None
    async with grpc.aio.insecure_channel(server.grpc.address) as channel:
        stub = svc_grpc.AgentServiceStub(channel)
        start = time.perf_counter()
        first = 0.0
        count = 0
        async for _ in stub.Run(svc.RunRequest(prompt=prompt)):
            count += 1
            if count == 1:
                first = time.perf_counter() - start
        return count, first, time.perf_counter() - start


def _http(server: OmniServer) -> httpx.AsyncClient:
    url = next(t for t in server.transports if isinstance(t, SseTransport)).url
    return httpx.AsyncClient(base_url=url, timeout=60)


async def reference_sse_run(server: OmniServer, prompt: str) -> Sample:
    async with _http(server) as http:
        sid = (await http.post("/api/sessions", json={})).json()["session"]["sessionId"]
        connected = asyncio.Event()
        marks: list[float] = []
        count = 0

        async def watch() -> None:
            nonlocal count
            async for _ in read_reference(http, f"/api/sessions/{sid}/stream", until_idle=True):
                count += 1
                if count == 1:
                    connected.set()  # the connect-time task_state, not counted below
                    continue
                marks.append(time.perf_counter())

        watcher = asyncio.create_task(watch())
        await connected.wait()
        start = time.perf_counter()
        await http.post(f"/api/sessions/{sid}/tasks", json={"prompt": prompt})
        await watcher
        return count - 1, marks[0] - start, marks[-1] - start


async def dialect_sse_run(server: OmniServer, prompt: str) -> Sample:
    async with _http(server) as http:
        start = time.perf_counter()
        first = 0.0
        count = 0
        async with aconnect_sse(http, "POST", "/v1/runs", json={"prompt": prompt}) as source:
            async for _ in source.aiter_sse():
                count += 1
                if count == 1:
                    first = time.perf_counter() - start
        return count, first, time.perf_counter() - start


Runner = Callable[[OmniServer, str], Awaitable[Sample]]


async def main(repeat: int, rounds: int) -> None:
    with tempfile.TemporaryDirectory() as data:
        server = build_server(
            ServerConfig(
                engine="demo",
                engine_options={"repeat": str(repeat)},
                data_dir=Path(data),
                grpc=GrpcConfig(host="127.0.0.1", port=0),
                http=SseConfig(host="127.0.0.1", port=0),
            )
        )
        await server.start()
        runners: dict[str, Runner] = {
            "gRPC Run": grpc_run,
            "reference SSE": reference_sse_run,
            "Omni SSE dialect": dialect_sse_run,
        }
        results: dict[str, list[Sample]] = {name: [] for name in runners}
        try:
            for runner in runners.values():  # warm-up
                await runner(server, "warm up")
            for i in range(rounds):  # interleaved, so drift hits every transport alike
                for name, runner in runners.items():
                    results[name].append(await runner(server, f"round {i}"))
        finally:
            await server.stop()

    base_rate = statistics.median(n / total for n, _, total in results["gRPC Run"])
    base_first = statistics.median(first for _, first, _ in results["gRPC Run"])
    print(f"demo engine, repeat={repeat}, {rounds} rounds, medians (loopback, one process)")
    header = ("transport", "events", "events/s", "vs gRPC", "first event", "vs gRPC")
    print(
        f"{header[0]:<18}{header[1]:>8}{header[2]:>12}{header[3]:>9}{header[4]:>14}{header[5]:>9}"
    )
    for name, samples in results.items():
        rate = statistics.median(n / total for n, _, total in samples)
        first = statistics.median(f for _, f, _ in samples)
        events = samples[0][0]
        print(
            f"{name:<18}{events:>8}{rate:>12,.0f}{rate / base_rate:>8.2f}x"
            f"{first * 1000:>11.2f} ms{first / base_first:>8.2f}x"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=200, help="demo answer repetitions")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    asyncio.run(main(args.repeat, args.rounds))
