"""HTTP requests that get no answer at all (#40 item 5).

A client that reuses a keep-alive connection at the moment the server closes
it for idleness gets "Server disconnected without sending a response": for a
task's POST it cannot tell whether the task was accepted. The server's idle
timeout is now longer than the client pools' (310 s), so the client closes
first. This benchmark provokes the race: CLIENTS httpx clients (keep-alive
expiry 60 s) each create a session and post a task, then wait about the
given idle timeout (uniformly within +-50 ms of it) before their next
request on the same connection, again and again for SECONDS; it counts the
requests that got no answer.

    .venv/bin/python benchmarks/no_answer.py [--seconds 40] [--clients 16]
        [--idle 5]  (whole seconds, as serve takes it)

Each row is a fresh ``omni-grpc serve``: first with ``--idle-timeout`` set
to ``--idle`` (the server closing first, as the old 5 s default did), then
with the default. Same tree, same run.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx


def start_server(data_dir: Path, extra: list[str]) -> tuple[subprocess.Popen[str], str]:
    cmd = [sys.executable, "-m", "omni_grpc", "serve", "--grpc-port", "0", "--http-port", "0",
           "--data-dir", str(data_dir), "--no-metrics", "--pacing", "0", *extra]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    http = None
    for line in proc.stdout:
        if match := re.search(r"HTTP/SSE on (http://\S+?)/ ", line):
            http = match.group(1)
        if line.strip() == "omni-grpc ready":
            assert http is not None
            return proc, http
    raise RuntimeError(f"serve exited: {proc.wait()}")


async def client(
    http: str, idle: int, until: float, counts: dict[str, int], kinds: dict[str, int]
) -> None:
    limits = httpx.Limits(max_connections=1, keepalive_expiry=60)
    async with httpx.AsyncClient(base_url=http, timeout=60, limits=limits) as c:
        while time.monotonic() < until:
            for step in ("create", "task"):
                try:
                    if step == "create":
                        r = await c.post("/api/sessions", json={})
                        session_id = r.json()["session"]["sessionId"]
                    else:
                        r = await c.post(f"/api/sessions/{session_id}/tasks", json={"prompt": "hi"})
                    counts["answered"] += 1
                except httpx.TransportError as exc:
                    # Sent on a connection the server closed: no answer, by
                    # whichever name the client's socket gave it.
                    counts["no answer"] += 1
                    kinds[type(exc).__name__] = kinds.get(type(exc).__name__, 0) + 1
                    break
                await asyncio.sleep(idle + random.uniform(-0.05, 0.05))


async def one(http: str, args: argparse.Namespace) -> tuple[dict[str, int], dict[str, int]]:
    counts = {"answered": 0, "no answer": 0}
    kinds: dict[str, int] = {}
    until = time.monotonic() + args.seconds
    await asyncio.gather(
        *(client(http, args.idle, until, counts, kinds) for _ in range(args.clients))
    )
    return counts, kinds


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=40.0)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--idle", type=int, default=5)
    args = parser.parse_args()
    print("| server idle timeout | requests | no answer | as |")
    print("|---|---:|---:|---|")
    with tempfile.TemporaryDirectory() as tmp:
        configs = [(f"{args.idle:g} s", ["--idle-timeout", str(args.idle)]), ("default", [])]
        for n, (name, extra) in enumerate(configs):
            proc, http = start_server(Path(tmp) / f"serve-{n}", extra)
            try:
                counts, kinds = await one(http, args)
            finally:
                proc.terminate()
                proc.wait(30)
            lost = counts["no answer"]
            named = ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items())) or "-"
            print(f"| {name} | {counts['answered'] + lost} | {lost} | {named} |", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
