"""Server CPU to carry one large task to several reference SSE readers (#27).

Each round starts a fresh ``omni-grpc serve`` (memory backend, demo engine)
per tree, connects ``readers`` readers to ``GET /api/sessions/{id}/stream`` of
a new session, posts one task whose prompt of ``mib`` MiB the demo echoes in
its thinking and its answer, and reads every stream to the task's end. Each
reader must see both echoes and no ``resync_required``. The figure is the
server's CPU time (user + system, /proc) from the post to the last reader's
end, the wall time, and its peak RSS (``VmHWM``) over its RSS before the
task, in MiB and per prompt MiB; with ``--baseline-src`` a server from another tree's
``src/`` runs the same round just before ("before" → "after", rounds
alternating), and the ratio is after / before per round (median and range).
The readers share this process, so wall time includes their parsing.

    .venv/bin/python benchmarks/large_sse.py [--mib 16] [--readers 10] [--rounds 5]
        [--baseline-src OTHER_TREE/src]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

import httpx
from _common import cpu_seconds  # the modules beside this file
from large_messages import python_path, rss_kib
from soak import start, stop

from omni_grpc.client.sse import read_reference

MiB = 1 << 20


async def one_round(pid: int, base: str, prompt: str, readers: int) -> tuple[float, float, float]:
    async with httpx.AsyncClient(base_url=base, timeout=600) as http:
        created = await http.post("/api/sessions", json={})
        sid = created.json()["session"]["sessionId"]
        connected = [asyncio.Event() for _ in range(readers)]

        async def watch(connected: asyncio.Event) -> int:
            echoes = resyncs = 0
            async for item in read_reference(http, f"/api/sessions/{sid}/stream", until_idle=True):
                connected.set()
                resyncs += item.server_event_kind == "resync_required"
                echoes += item.message is not None and repr(prompt) in item.data
            if resyncs or echoes < 2:
                raise SystemExit(f"a reader got {echoes} echoes and {resyncs} resyncs")
            return echoes

        watchers = [asyncio.create_task(watch(c)) for c in connected]
        await asyncio.gather(*(c.wait() for c in connected))
        rss, cpu, wall = rss_kib(pid, "VmRSS"), cpu_seconds(pid), time.perf_counter()
        posted = await http.post(f"/api/sessions/{sid}/tasks", json={"prompt": prompt})
        if posted.status_code != 202:
            raise SystemExit(f"task refused: {posted.status_code} {posted.text}")
        await asyncio.gather(*watchers)
        peak = (rss_kib(pid, "VmHWM") - rss) / 1024
        return cpu_seconds(pid) - cpu, time.perf_counter() - wall, peak


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=float, default=16)
    parser.add_argument("--readers", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--baseline-src", help="another tree's src/ for a 'before' server")
    args = parser.parse_args()
    trees = [("before", args.baseline_src), ("after", None)] if args.baseline_src else [("", None)]
    prompt = "p" * int(args.mib * MiB)
    figures: dict[str, list[tuple[float, float, float]]] = {name: [] for name, _ in trees}
    with tempfile.TemporaryDirectory() as tmp:
        for n in range(args.rounds):
            for name, src in trees:
                with python_path(src):
                    served = start(Path(tmp) / f"{name}-{n}", "--no-metrics")
                try:
                    one = await one_round(served.proc.pid, served.http, prompt, args.readers)
                    figures[name].append(one)
                finally:
                    stop(served)
    print(f"{args.mib:g} MiB prompt, {args.readers} reference SSE readers, {args.rounds} rounds")
    print(
        "| tree | server CPU s (median, range) | wall s (median, range) "
        "| peak RSS growth MiB (median, range) | growth / prompt |"
    )
    print("|---|---:|---:|---:|---:|")
    for name, rows in figures.items():
        cpu, wall, peak = ([r[i] for r in rows] for i in range(3))
        print(
            f"| {name or 'this tree'} | {spread(cpu)} | {spread(wall)} | {spread(peak)} "
            f"| {statistics.median(peak) / args.mib:.1f}x |"
        )
    if args.baseline_src:
        ratios = [a[0] / b[0] for a, b in zip(figures["after"], figures["before"], strict=True)]
        print(
            f"\nserver CPU after / before, per round: median {statistics.median(ratios):.2f} "
            f"({min(ratios):.2f}-{max(ratios):.2f})"
        )


if __name__ == "__main__":
    asyncio.run(main())
