"""Connect and gRPC-Web against gRPC: events per second and server CPU per
delivered event, one real ``omni-grpc serve`` process, all in one run.

Each round streams one Run of the demo engine's long answer (zero pacing)
in a new session over each protocol, in rotating order, each client on a
connection it keeps between rounds: gRPC on the gRPC port (grpc.aio), and
on the HTTP port over HTTP/1.1 (httpx) Connect with the proto codec,
Connect with JSON, gRPC-Web binary and gRPC-Web-text. Measured per stream:
the events it carried, the seconds from the call to its last event, and the
SERVER process's CPU (all threads, /proc schedstat) meanwhile. Each figure
is the best of the rounds; ratios are to gRPC's best.

    .venv/bin/python benchmarks/connect_stream.py [--repeat 300] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import grpc
import httpx
from _common import threads_cpu_seconds  # benchmarks/_common.py
from google.protobuf import json_format

from omni_grpc_proto.omni.v1 import agent_service_pb2 as pb
from omni_grpc_proto.omni.v1 import agent_service_pb2_grpc

PROTOCOLS = {
    # name: (content type, JSON codec, base64 body)
    "connect+proto": ("application/connect+proto", False, False),
    "connect+json": ("application/connect+json", True, False),
    "grpc-web": ("application/grpc-web+proto", False, False),
    "grpc-web-text": ("application/grpc-web-text", False, True),
}


def start_server(data_dir: Path, repeat: int) -> tuple[subprocess.Popen[str], str, str]:
    cmd = [
        sys.executable, "-m", "omni_grpc", "serve", "--grpc-port", "0", "--http-port", "0",
        "--data-dir", str(data_dir), "--engine-opt", f"repeat={repeat}",
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    grpc_addr = http_url = ""
    for line in proc.stdout:
        if "gRPC on grpc://" in line:
            grpc_addr = line.strip().rsplit("grpc://", 1)[-1]
        elif "HTTP/SSE on " in line:
            http_url = line.split(" on ", 1)[1].split("/ ", 1)[0]
        elif line.strip() == "omni-grpc ready":
            return proc, grpc_addr, http_url
    raise RuntimeError("omni-grpc serve did not start")


async def grpc_stream(channel: grpc.aio.Channel) -> int:
    stub = agent_service_pb2_grpc.AgentServiceStub(channel)
    count = 0
    async for _ in stub.Run(pb.RunRequest(prompt="bench")):
        count += 1
    return count


async def http_stream(http: httpx.AsyncClient, name: str) -> int:
    content_type, as_json, text = PROTOCOLS[name]
    request = pb.RunRequest(prompt="bench")
    data = json_format.MessageToJson(request).encode() if as_json else request.SerializeToString()
    body = struct.pack(">BI", 0, len(data)) + data
    count = 0
    async with http.stream(
        "POST",
        "/omni.v1.AgentService/Run",
        content=base64.b64encode(body) if text else body,
        headers={"content-type": content_type},
    ) as response:
        buffered, pending = b"", b""
        async for chunk in response.aiter_bytes():
            if text:
                pending += chunk
                whole = len(pending) - len(pending) % 4
                buffered += base64.b64decode(pending[:whole])
                pending = pending[whole:]
            else:
                buffered += chunk
            at = 0
            while at + 5 <= len(buffered):
                flags, length = struct.unpack_from(">BI", buffered, at)
                if at + 5 + length > len(buffered):
                    break
                message = buffered[at + 5 : at + 5 + length]
                if flags & 0x82:  # the end: a status or trailers
                    ok = message in (b"{}", b"grpc-status: 0\r\n")
                    if not ok:
                        raise RuntimeError(f"{name}: the stream failed: {message!r}")
                else:
                    # Decoded as a client would, so a broken frame fails here.
                    if as_json:
                        json_format.Parse(message, pb.RunResponse())
                    else:
                        pb.RunResponse.FromString(message)
                    count += 1
                at += 5 + length
            buffered = buffered[at:]
    return count


async def measured(pid: int, stream: Awaitable[int]) -> tuple[int, float, float]:
    before = threads_cpu_seconds(pid)
    begin = time.perf_counter()
    events = await stream
    return events, time.perf_counter() - begin, threads_cpu_seconds(pid) - before


async def bench(repeat: int, rounds: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        proc, grpc_addr, http_url = start_server(Path(tmp) / "data", repeat)
        try:
            channel = grpc.aio.insecure_channel(grpc_addr)
            http = httpx.AsyncClient(base_url=http_url, timeout=60)
            runs: dict[str, Callable[[], Awaitable[int]]] = {"grpc": lambda: grpc_stream(channel)}
            for name in PROTOCOLS:
                runs[name] = lambda name=name: http_stream(http, name)  # type: ignore[misc]
            for run in runs.values():  # warm-up: connections, caches
                await run()
            best: dict[str, tuple[float, float, int]] = {}  # name -> (rate, cpu us/event, events)
            names = list(runs)
            for r in range(rounds):
                for name in names[r % len(names) :] + names[: r % len(names)]:
                    events, seconds, cpu = await measured(proc.pid, runs[name]())
                    rate, per_event = events / seconds, cpu / events * 1e6
                    old = best.get(name)
                    best[name] = (
                        max(rate, old[0]) if old else rate,
                        min(per_event, old[1]) if old else per_event,
                        events,
                    )
            await channel.close()
            await http.aclose()
        finally:
            proc.terminate()
            proc.wait(10)
    grpc_cpu = best["grpc"][1]
    print(f"one Run per protocol and round, best of {rounds} rounds, server CPU per event")
    print(f"{'protocol':<14} {'events':>6} {'events/s':>9} {'CPU us/event':>13} {'vs gRPC':>8}")
    for name, (rate, per_event, events) in best.items():
        ratio = per_event / grpc_cpu
        print(f"{name:<14} {events:>6} {rate:>9.0f} {per_event:>13.1f} {ratio:>7.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=300, help="demo answer repetitions")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    asyncio.run(bench(args.repeat, args.rounds))


if __name__ == "__main__":
    main()
