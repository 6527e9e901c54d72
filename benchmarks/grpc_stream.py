"""AgentService.Run throughput against a raw grpc.aio floor, in one run.

* omni: ``omni-grpc serve`` (demo engine, zero pacing, a long answer) in its
  own process; the client streams ``Run`` and decodes every RunResponse.
* floor: a bare grpc.aio server in its own process streaming the very same
  RunResponse bytes (recorded from a calibration run, so count and sizes
  match), pre-serialized, with no hub, engine, codec or trace behind it.

Rounds alternate omni/floor; medians are reported with the omni/floor ratio
(events/s) and the time to the first message of each.

    .venv/bin/python benchmarks/grpc_stream.py [--repeat 300] [--rounds 10]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path

import grpc

from omni_grpc_proto.omni.v1 import agent_service_pb2 as pb
from omni_grpc_proto.omni.v1 import agent_service_pb2_grpc

FLOOR_METHOD = "/bench.Floor/Stream"
# (events, bytes, seconds to the first event, seconds for the whole stream,
#  server CPU seconds spent during the stream)
Sample = tuple[int, int, float, float, float]
_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


# ---- the floor server (child process) -------------------------------------------


def read_frames(path: Path) -> list[bytes]:
    data = path.read_bytes()
    frames, offset = [], 0
    while offset < len(data):
        (size,) = struct.unpack_from(">I", data, offset)
        frames.append(data[offset + 4 : offset + 4 + size])
        offset += 4 + size
    return frames


async def serve_floor(frames_path: Path) -> None:
    frames = read_frames(frames_path)

    async def stream(_request: bytes, _context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
        for frame in frames:
            yield frame

    server = grpc.aio.server()
    handler = grpc.unary_stream_rpc_method_handler(stream)  # bytes in, bytes out
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("bench.Floor", {"Stream": handler}),)
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(f"floor on 127.0.0.1:{port}", flush=True)
    await server.wait_for_termination()


# ---- clients ------------------------------------------------------------------------


async def measured(pid: int, run: Awaitable[tuple[int, int, float, float]]) -> Sample:
    before = cpu_seconds(pid)
    count, size, first, total = await run
    return count, size, first, total, cpu_seconds(pid) - before


async def omni_run(
    target: str, prompt: str, keep: list[bytes] | None = None
) -> tuple[int, int, float, float]:
    async with grpc.aio.insecure_channel(target) as channel:
        stub = agent_service_pb2_grpc.AgentServiceStub(channel)
        start = time.perf_counter()
        first, count, size = 0.0, 0, 0
        async for response in stub.Run(pb.RunRequest(prompt=prompt)):
            count += 1
            if count == 1:
                first = time.perf_counter() - start
            frame = response.SerializeToString()
            size += len(frame)
            if keep is not None:
                keep.append(frame)
        return count, size, first, time.perf_counter() - start


async def floor_run(target: str) -> tuple[int, int, float, float]:
    async with grpc.aio.insecure_channel(target) as channel:
        call = channel.unary_stream(
            FLOOR_METHOD,
            request_serializer=lambda b: b,
            response_deserializer=pb.RunResponse.FromString,
        )
        start = time.perf_counter()
        first, count, size = 0.0, 0, 0
        async for response in call(b""):
            count += 1
            if count == 1:
                first = time.perf_counter() - start
            size += response.ByteSize()
        return count, size, first, time.perf_counter() - start


def start(cmd: list[str], marker: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        if marker in line:
            return proc, line.strip().rsplit(" ", 1)[-1].split("://")[-1]
    raise RuntimeError(f"{cmd[2:4]} did not start")


async def bench(repeat: int, rounds: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        omni_proc, omni_target = start(
            [sys.executable, "-m", "omni_grpc", "serve", "--grpc-port", "0", "--no-http",
             "--data-dir", f"{tmp}/data", "--engine-opt", f"repeat={repeat}"],
            "gRPC on",
        )  # fmt: skip
        frames: list[bytes] = []
        try:
            await omni_run(omni_target, "calibrate", frames)
            frames_path = Path(tmp) / "frames.bin"
            frames_path.write_bytes(b"".join(struct.pack(">I", len(f)) + f for f in frames))
            floor_proc, floor_target = start(
                [sys.executable, __file__, "--serve-floor", str(frames_path)], "floor on"
            )
            try:
                omni: list[Sample] = []
                floor: list[Sample] = []
                for _ in range(rounds):
                    omni.append(await measured(omni_proc.pid, omni_run(omni_target, "go")))
                    floor.append(await measured(floor_proc.pid, floor_run(floor_target)))
            finally:
                floor_proc.terminate()
                floor_proc.wait()
        finally:
            omni_proc.terminate()
            omni_proc.wait()
    report(omni, floor, repeat)


def report(omni: list[Sample], floor: list[Sample], repeat: int) -> None:
    def summary(samples: list[Sample]) -> tuple[float, float, float, float]:
        events = statistics.median(n / t for n, _, _, t, _ in samples)
        mbps = statistics.median(b / t / 1e6 for _, b, _, t, _ in samples)
        ttfm = statistics.median(f for _, _, f, _, _ in samples) * 1000
        cpu = sum(c for *_, c in samples) / sum(n for n, *_ in samples) * 1e6
        return events, mbps, ttfm, cpu

    o, f = summary(omni), summary(floor)
    # Each round runs omni then floor back to back, so a per-round ratio cancels
    # part of the load other processes put on the machine.
    ratios = [(a[0] / a[3]) / (b[0] / b[3]) for a, b in zip(omni, floor, strict=True)]
    print(f"demo engine, repeat={repeat}: {omni[0][0]} events, {omni[0][1]} bytes per stream")
    print(f"{len(omni)} rounds each, medians; server CPU is the total over all rounds")
    print(f"{'':6} {'events/s':>9} {'MB/s':>6} {'first msg':>10} {'server CPU/event':>17}")
    for name, r in (("omni", o), ("floor", f)):
        print(f"{name:6} {r[0]:>9.0f} {r[1]:>6.2f} {r[2]:>8.2f}ms {r[3]:>15.1f}us")
    print(
        f"omni/floor events/s: ratio of medians {o[0] / f[0]:.2f}, median per-round ratio "
        f"{statistics.median(ratios):.2f}; floor/omni CPU per event {f[3] / o[3]:.2f} "
        "(the aim is >= 0.5)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--repeat", type=int, default=300, help="demo answer repetitions")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--serve-floor", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_floor:
        asyncio.run(serve_floor(args.serve_floor))
    else:
        asyncio.run(bench(args.repeat, args.rounds))


if __name__ == "__main__":
    main()
