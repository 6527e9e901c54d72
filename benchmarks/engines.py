"""Overhead of the real engines, each against a baseline measured in the same run.

* openai: the engine consuming a long chat-completions stream (partials, the
  complete message, usage) vs. a bare httpx-sse loop that only parses the same
  stream's JSON. Same local fake server, same process.
* command: the bridge relaying a child's OmniMessage lines (parse, validate,
  re-emit) vs. reading the same child's stdout lines raw.
* grpc upstream: a Run through a gateway (grpc:// engine) vs. the same Run
  straight on the upstream server (replay engine, no pacing).

Rounds alternate baseline and subject so drift hits both alike. Ratios are the
point; absolute rates are lower bounds (client, server and fake share a loop or
a GIL on a 2-core machine).

    .venv/bin/python benchmarks/engines.py [--rounds 5] [--chunks 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx
import orjson
from httpx_sse import aconnect_sse

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from fakes.harness import Approver  # noqa: E402
from fakes.openai_server import FakeOpenAI, text_reply  # noqa: E402

from omni_grpc.engines.base import AbortSignal, RunOptions  # noqa: E402
from omni_grpc.engines.command import create as command_engine  # noqa: E402
from omni_grpc.engines.openai import OpenAIConfig, OpenAIEngine  # noqa: E402
from omni_grpc.protocol import builders as b  # noqa: E402
from omni_grpc.server import ServerConfig, build_server  # noqa: E402
from omni_grpc.transport.grpc import GrpcConfig  # noqa: E402
from omni_grpc_proto.omni.v1 import agent_service_pb2 as svc  # noqa: E402
from omni_grpc_proto.omni.v1 import agent_service_pb2_grpc as svc_grpc  # noqa: E402

TRACE = ROOT / "tests" / "conformance" / "trace_basic_tool_turn_001.jsonl"


def options(workspace: Path) -> RunOptions:
    return RunOptions("bench", Approver(), AbortSignal(), workspace=workspace)


async def timed(fn: Callable[[], Awaitable[int]]) -> tuple[int, float]:
    start = time.perf_counter()
    count = await fn()
    return count, time.perf_counter() - start


async def compare(
    name: str, unit: str, baseline: Callable[[], Awaitable[int]],
    subject: Callable[[], Awaitable[int]], rounds: int,
) -> None:  # fmt: skip
    base_s: list[float] = []
    subj_s: list[float] = []
    base_n = subj_n = 0
    await baseline(), await subject()  # warm up
    for _ in range(rounds):
        base_n, s = await timed(baseline)
        base_s.append(s)
        subj_n, s = await timed(subject)
        subj_s.append(s)
    b_med, s_med = statistics.median(base_s), statistics.median(subj_s)
    print(
        f"{name:14} baseline {base_n / b_med:10.0f} {unit}/s ({b_med * 1000:7.1f} ms)   "
        f"engine {subj_n / s_med:10.0f} {unit}/s ({s_med * 1000:7.1f} ms)   "
        f"time ratio {s_med / b_med:5.2f}x"
    )


async def bench_openai(rounds: int, chunks: int, workspace: Path) -> None:
    text = "word " * chunks
    with FakeOpenAI() as fake:
        opts = {"base_url": fake.base_url, "model": "m", "builtin_tools": "false"}
        engine = OpenAIEngine(OpenAIConfig.from_options(opts, env={}))
        http = httpx.AsyncClient(timeout=60)

        async def baseline() -> int:
            fake.script(text_reply(text, pieces=chunks))
            count = 0
            body = {"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": True}
            async with aconnect_sse(http, "POST", fake.base_url + "/chat/completions",
                                    json=body) as source:  # fmt: skip
                async for event in source.aiter_sse():
                    if event.data != "[DONE]":
                        orjson.loads(event.data)
                        count += 1
            return count

        async def subject() -> int:
            fake.script(text_reply(text, pieces=chunks))
            count = 0
            async for _ in engine.run([b.user_text("x")], options(workspace)):
                count += 1
            return count

        await compare("openai", "msg", baseline, subject, rounds)
        await http.aclose()
        await engine.aclose()


CHILD = """
import sys, json
sys.stdin.readline()
def line(kind, **payload):
    msg = {"timestamp": "2026-01-01T00:00:00.000Z", "type": "model_msg",
           "payload": {"type": kind, "role": "assistant", **payload, "stop_reason": "completed"}}
    return json.dumps(msg) + "\\n"
n = int(sys.argv[1])
sys.stdout.write(line("partial_text", event_type="start", text=""))
sys.stdout.write(line("partial_text", event_type="delta", text="word ") * n)
sys.stdout.write(line("partial_text", event_type="stop", text=""))
sys.stdout.write(line("text", text="word " * n))
"""


async def bench_command(rounds: int, count: int, workspace: Path) -> None:
    argv = [sys.executable, "-c", CHILD, str(count)]
    engine = command_engine("command:" + shlex.join(argv))

    async def baseline() -> int:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
        )
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(b"{}\n")
        lines = 0
        while await proc.stdout.readline():
            lines += 1
        await proc.wait()
        return lines

    async def subject() -> int:
        n = 0
        async for _ in engine.run([b.user_text("x")], options(workspace)):
            n += 1
        return n

    await compare("command", "msg", baseline, subject, rounds)


async def bench_grpc_upstream(rounds: int, data: Path) -> None:
    def config(engine: str, opts: dict[str, str], sub: str) -> ServerConfig:
        grpc_config = GrpcConfig(host="127.0.0.1", port=0)
        return ServerConfig(
            engine=engine, engine_options=opts, data_dir=data / sub, grpc=grpc_config,
            shutdown_grace=1.0,
        )  # fmt: skip

    upstream = build_server(config(f"replay:{TRACE}", {"delay_ms": "0", "chunk": "1"}, "up"))
    await upstream.start()
    assert upstream.grpc is not None
    gateway = build_server(config(f"grpc://{upstream.grpc.address}", {}, "gw"))
    await gateway.start()
    assert gateway.grpc is not None

    async def run_on(address: str) -> int:
        import grpc

        async with grpc.aio.insecure_channel(address) as channel:
            stub = svc_grpc.AgentServiceStub(channel)
            return sum([1 async for _ in stub.Run(svc.RunRequest(prompt="x"))])

    upstream_addr, gateway_addr = upstream.grpc.address, gateway.grpc.address
    await compare("grpc upstream", "event",
                  lambda: run_on(upstream_addr), lambda: run_on(gateway_addr), rounds)  # fmt: skip
    await gateway.stop()
    await upstream.stop()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--chunks", type=int, default=2000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        workspace = Path(tmp)
        await bench_openai(args.rounds, args.chunks, workspace)
        await bench_command(args.rounds, args.chunks, workspace)
        await bench_grpc_upstream(args.rounds, workspace)


if __name__ == "__main__":
    asyncio.run(main())
