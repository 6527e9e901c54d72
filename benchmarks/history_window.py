"""GET /messages: a tail window against the full history, on one long session.

Writes a session of --tasks demo-shaped tasks (a prompt, two requests, a tool
call and its output, 12 records each) as a trace, serves it with the real
HTTP app on loopback, and times the full read, ``?tailLimit=20`` and a
``before`` page in the same run. A window still reads and scans the whole
trace (there is no per-shard cache), so the ratio says how much of the cost is
sending and serializing the transcript and how much reading it.

    .venv/bin/python benchmarks/history_window.py --tasks 2000 --repeat 5
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

import httpx

from omni_grpc import protocol as p
from omni_grpc.convert import message_from_dict, serialize_message
from omni_grpc.engines.demo import DemoEngine
from omni_grpc.runtime.hub import Hub
from omni_grpc.trace.paths import trace_path_for
from omni_grpc.transport.sse.app import create_app
from omni_grpc.transport.sse.server import HttpServer

SID = "session-2026-08-23-10-00-00-0a1b2c3d"


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


def write_trace(data: Path, tasks: int) -> int:
    meta = p.session_meta(p.session_meta_payload(SID, "omni-grpc", "demo", 32768, "", "", "/w"))
    records = [meta] + [r for n in range(tasks) for r in task(n)]
    path = trace_path_for(data / "traces", SID, 1)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"".join(serialize_message(message_from_dict(r)) + b"\n" for r in records))
    return len(records)


async def timed(http: httpx.AsyncClient, query: str, repeat: int) -> tuple[float, int]:
    best, size = float("inf"), 0
    for _ in range(repeat):
        start = time.perf_counter()
        r = await http.get(f"/api/sessions/{SID}/messages{query}")
        best = min(best, time.perf_counter() - start)
        assert r.status_code == 200, r.text
        size = len(r.content)
    return best, size


async def main(tasks: int, repeat: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp)
        count = write_trace(data, tasks)
        hub = Hub(DemoEngine(), data)
        server = HttpServer(create_app(hub), port=0)
        await server.start()
        try:
            async with httpx.AsyncClient(base_url=server.url, timeout=120) as http:
                full, full_size = await timed(http, "", repeat)
                tail = await http.get(f"/api/sessions/{SID}/messages?tailLimit=20")
                before = tail.json()["page"]["before"]
                rows = [
                    ("full history", *await timed(http, "", repeat)),
                    ("tailLimit=20", *await timed(http, "?tailLimit=20", repeat)),
                    (
                        f"before={before}&limit=20",
                        *await timed(http, f"?before={before}&limit=20", repeat),
                    ),
                ]
        finally:
            await hub.shutdown()
            await server.stop()
    print(f"{tasks} tasks, {count} records, full body {full_size / 1e6:.1f} MB, best of {repeat}")
    print("| read | ms | bytes | time vs the full read |")
    print("| --- | ---: | ---: | ---: |")
    del full
    base = rows[0][1]
    for name, seconds, size in rows:
        print(f"| {name} | {seconds * 1000:.0f} | {size:,} | {seconds / base:.2f}x |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    asyncio.run(main(args.tasks, args.repeat))
