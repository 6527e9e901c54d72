"""History windows at 100, 2,000 and 20,000 tasks, side by side in one run.

For each size, writes a session of that many demo-shaped tasks (a prompt, two
requests, a tool call and its output, 12 records each) as a trace with no
index, serves it with a real server (gRPC and HTTP on loopback), and times:

* the first window, which builds the index from the trace (once per trace);
* ``GET /messages?tailLimit=20`` and ``?before=<mid-session cursor>&limit=20``;
* GetHistory with ``page_size=20`` (the newest 20 tasks);
* a resume after an id the buffer no longer holds: ``Attach`` (or the SSE
  ``/stream`` with ``Last-Event-ID``) answers ``resync_required``, and the
  client loads the newest page (GetHistory, or ``/messages?tailLimit=20``);
* the full read (``GET /messages`` without a window), once, for scale;
* the memory one tail window allocates at its peak (tracemalloc, in process).

Then the index's size against the trace's, and the writer's CPU time per
record with and without the index (interleaved rounds, thread CPU time).
Ratios are to the 100-task session of the same run.

    .venv/bin/python benchmarks/history_window.py --tasks 100,2000,20000 --repeat 5
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from pathlib import Path

import grpc
import httpx
from _common import interleaved_rates  # benchmarks/_common.py

from omni_grpc import protocol as p
from omni_grpc.convert import message_from_dict, serialize_message
from omni_grpc.server import ServerConfig, build_server
from omni_grpc.trace import TraceWriter
from omni_grpc.trace.index import index_path, read_window
from omni_grpc.trace.paths import trace_path_for
from omni_grpc.transport.grpc import GrpcConfig
from omni_grpc.transport.sse.transport import SseConfig, SseTransport
from omni_grpc_proto.omni.v1 import agent_service_pb2 as pb
from omni_grpc_proto.omni.v1 import agent_service_pb2_grpc

SID = "session-2026-08-23-10-00-00-0a1b2c3d"
RECORDS_PER_TASK = 12


def task(n: int) -> list[dict[str, object]]:
    counts = {"cache_read": 0, "cache_write": 40, "output": 20, "total": 60}
    call = f"call_{n}"
    return [
        p.user_text(f"task {n}: list the workspace and say what is there"),
        p.request_begin(),
        p.assistant_text("I'll list the session workspace first."),
        p.tool_call("list_workspace", '{"path":"."}', call),
        p.approval_decision("allow", call),
        p.token_usage(counts, counts),
        p.request_end("completed"),
        p.tool_call_output("notes.md\nsrc/\n" * 4, call),
        p.request_begin(),
        p.assistant_text("The workspace holds notes.md and src/. " * 6),
        p.token_usage(counts, counts),
        p.request_end("completed"),
    ]


def lines(tasks: int) -> list[bytes]:
    meta = p.session_meta(p.session_meta_payload(SID, "omni-grpc", "demo", 32768, "", "", "/w"))
    records = [meta] + [r for n in range(tasks) for r in task(n)]
    return [serialize_message(message_from_dict(r)) + b"\n" for r in records]


def write_trace(data: Path, tasks: int) -> Path:
    path = trace_path_for(data / "traces", SID, 1)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"".join(lines(tasks)))
    return path


async def best(work: Callable[[], Awaitable[object]], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        await work()
        times.append(time.perf_counter() - start)
    return min(times)


async def measure(tasks: int, repeat: int) -> dict[str, float]:
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp)
        shard = write_trace(data, tasks)
        config = ServerConfig(
            data_dir=data,
            grpc=GrpcConfig(host="127.0.0.1", port=0),
            http=SseConfig(host="127.0.0.1", port=0, heartbeat=None),
            metrics=False,
            shutdown_grace=1.0,
        )
        server = build_server(config)
        await server.start()
        try:
            assert server.grpc is not None
            sse = next(t for t in server.transports if isinstance(t, SseTransport))
            channel = grpc.aio.insecure_channel(server.grpc.address)
            stub = agent_service_pb2_grpc.AgentServiceStub(channel)
            async with httpx.AsyncClient(base_url=sse.url, timeout=600) as http:

                async def get(query: str) -> bytes:
                    r = await http.get(f"/api/sessions/{SID}/messages{query}")
                    assert r.status_code == 200, r.text
                    return r.content

                async def page() -> int:
                    call = stub.GetHistory(pb.GetHistoryRequest(session_id=SID, page_size=20))
                    return len([r async for r in call])

                async def resume() -> int:
                    attach = stub.Attach(
                        pb.AttachRequest(session_id=SID, after_event_id="0badc0de-7")
                    )
                    first = await attach.read()
                    assert first.event.HasField("resync_required"), first
                    attach.cancel()
                    return await page()

                warm = await http.get(f"/api/sessions/{SID}")  # the HTTP path, not the index
                assert warm.status_code == 200, warm.text
                start = time.perf_counter()
                await get("?tailLimit=20")
                out["first window (builds the index)"] = time.perf_counter() - start
                middle = f"1:{1 + RECORDS_PER_TASK * (tasks // 2)}"
                out["tailLimit=20"] = await best(lambda: get("?tailLimit=20"), repeat)
                out["before=<middle>&limit=20"] = await best(
                    lambda: get(f"?before={middle}&limit=20"), repeat
                )
                out["GetHistory page_size=20"] = await best(page, repeat)
                out["Attach past the buffer + newest page"] = await best(resume, repeat)

                async def sse_resume() -> bytes:
                    headers = {"Last-Event-ID": "0badc0de-7"}
                    async with http.stream(
                        "GET", f"/api/sessions/{SID}/stream", headers=headers
                    ) as stream:
                        async for line in stream.aiter_lines():
                            if line.startswith("data:"):
                                assert "resync_required" in line, line
                                break
                    return await get("?tailLimit=20")

                out["SSE Last-Event-ID past the buffer + tailLimit=20"] = await best(
                    sse_resume, repeat
                )
                start = time.perf_counter()
                await get("")
                out["full read, once"] = time.perf_counter() - start
            await channel.close()
        finally:
            await server.stop()
        tracemalloc.start()
        read_window([(1, shard)], 20, None)
        out["peak MB of one window"] = tracemalloc.get_traced_memory()[1] / 1e6
        tracemalloc.stop()
        out["trace MB"] = shard.stat().st_size / 1e6
        out["index KB"] = index_path(shard).stat().st_size / 1e3
    return out


def writer_cost(tasks: int, repeat: int) -> dict[str, float]:
    """Microseconds of CPU per record written, with and without the index."""
    messages = [message_from_dict(r) for r in [task(0)[0], *task(0)[1:]]]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        runs = {"with the index": 0, "without": 0}

        def work(indexed: bool) -> int:
            name = "with the index" if indexed else "without"
            runs[name] += 1
            path = trace_path_for(root, SID, 1).with_name(f"{name[:4]}-{runs[name]}_001.jsonl")
            path.parent.mkdir(parents=True, exist_ok=True)
            writer = TraceWriter(path, index=indexed)
            for _ in range(tasks):
                for msg in messages:
                    writer.write(msg)
            return tasks * len(messages)

        rates = interleaved_rates(
            {"with the index": lambda: work(True), "without": lambda: work(False)}, repeat
        )
    return {name: 1e6 / rate for name, rate in rates.items()}


async def main(sizes: list[int], repeat: int, writer_tasks: int) -> None:
    results = {n: await measure(n, repeat) for n in sizes}
    base = sizes[0]
    rows = [k for k in results[base] if k not in ("peak MB of one window", "trace MB", "index KB")]
    print(f"best of {repeat}; ratio: time against the {base:,}-task session")
    print("| read | " + " | ".join(f"{n:,} tasks" for n in sizes) + " |")
    print("| --- |" + " ---: |" * len(sizes))
    for row in rows:
        cells = []
        for n in sizes:
            ms = results[n][row] * 1000
            ratio = results[n][row] / results[base][row]
            cells.append(f"{ms:,.1f} ms" + ("" if n == base else f" ({ratio:.2f}x)"))
        print(f"| {row} | " + " | ".join(cells) + " |")
    print("| peak memory of one tail window | " + " | ".join(
        f"{results[n]['peak MB of one window']:.2f} MB" for n in sizes
    ) + " |")  # fmt: skip
    print("| trace / index | " + " | ".join(
        f"{results[n]['trace MB']:.1f} MB / {results[n]['index KB']:.1f} KB "
        f"({results[n]['index KB'] / 1e3 / results[n]['trace MB']:.2%})"
        for n in sizes
    ) + " |")  # fmt: skip
    cost = writer_cost(writer_tasks, repeat)
    print(f"\nwriter, {writer_tasks * RECORDS_PER_TASK:,} records a round, best of {repeat}:")
    for name, us in cost.items():
        print(f"  {name}: {us:.1f} us CPU per record")
    print(f"  the index adds {cost['with the index'] / cost['without'] - 1:.0%}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="100,2000,20000", help="comma-separated sizes")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--writer-tasks", type=int, default=500)
    args = parser.parse_args()
    asyncio.run(main([int(n) for n in args.tasks.split(",")], args.repeat, args.writer_tasks))
