"""Peak RSS of a server carrying one large message to its readers (#27).

For each case (prompt size x readers x backend) a fresh ``omni-grpc serve``
runs a small turn (its RSS then is the baseline), then ``readers - 1``
Attach readers join the session and one Run of the large prompt (the demo
engine echoes it in its thinking and its answer) is read by all of them.
Every reader must get the run whole (no ``resync_required``, both echoes);
the figure is the server's peak RSS (``VmHWM``) over its baseline, in MiB
and in byte windows (the default window, 8 Mi UTF-16 units). redis-server's
own memory is not counted.

    .venv/bin/python benchmarks/large_messages.py [--sizes 1,8,16] [--readers 1,10]
        [--backends memory,redis] [--also 60x1,redis:60x1] [--baseline-src OTHER_TREE/src]

``--baseline-src``: each case also runs on a server from another tree's
``src/`` (before → after in one run, the baseline first), each on a fresh
server and a fresh session.

``--prompt words``: the prompt is a log of short lines (about 150,000 words
a MiB) instead of one long word. Every case also gives the run's events, its
seconds as its reader read it, and the server's CPU seconds meanwhile: how
many deltas the demo engine streamed, and what they cost.

``--via a2a``: the large run is an A2A task instead (SendStreamingMessage on
the A2A gRPC service beside AgentService, in the small turn's context), read
as A2A's artifact chunks; the Attach readers are as before. ``--via
a2a-jsonrpc`` and ``--via a2a-rest``: the same task over the HTTP port's
JSON-RPC and HTTP+JSON bindings (their SSE streams).

``--timeline``: the server's RSS is also sampled every 2 ms during the large
run, and a second table gives, for each message of 1 MiB or more the run
reader got, the highest growth between the previous such message's arrival
and its own: what the server held while producing and sending that one.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import grpc
import httpx
from a2a.types import a2a_pb2 as a2a
from a2a.types import a2a_pb2_grpc
from scale_out import Proc, start_redis, start_serve  # benchmarks/scale_out.py

from omni_grpc.client import AgentClient
from omni_grpc.client.events import StreamEvent
from omni_grpc.runtime.event_log import ReplayWindow

MiB = 1 << 20
WINDOW = ReplayWindow().max_bytes


def rss_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} for {pid}")


def prompt_of(mib: int, kind: str) -> str:
    """One long word, or a log of short lines (``words``) of ``mib`` MiB."""
    if kind == "word":
        return "p" * (mib * MiB)
    line = "line {:08d}: GET /index.html 200\n"
    return "".join(line.format(n) for n in range(mib * MiB // len(line.format(0))))


def cpu_seconds(pid: int) -> float:
    """The process's user and system CPU time so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def echoed(events: list[StreamEvent], prompt: str) -> int:
    shown = repr(prompt)
    out = 0
    for event in events:
        message = event.message
        if message is not None:
            arm = message.WhichOneof("payload")
            if arm == "text":
                out += shown in message.text.text
            elif arm == "thinking":
                out += shown in message.thinking.thinking
    return out


Samples = list[tuple[float, float]]  # (seconds since the large run began, RSS MiB)
Arrivals = list[tuple[float, str]]  # (seconds, payload arm) of each message >= 1 MiB


@contextlib.contextmanager
def sampled(pid: int, samples: Samples) -> Iterator[float]:
    """Samples ``pid``'s RSS every 2 ms into ``samples`` (a thread: /proc
    reads release the GIL) while the body runs; yields its start time."""
    started = time.perf_counter()
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.002):
            samples.append((time.perf_counter() - started, rss_kib(pid, "VmRSS") / 1024))

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield started
    finally:
        done.set()
        thread.join()


def in_flight(samples: Samples, arrivals: Arrivals, base: float) -> list[tuple[str, float]]:
    """Per large message: the highest RSS growth over the baseline since the
    previous one arrived (0 if RSS never rose above it meanwhile)."""
    out = []
    since = 0.0
    for at, arm in arrivals:
        window = [rss for t, rss in samples if since <= t <= at]
        out.append((arm, max([base, *window]) - base))
        since = at
    return out


async def a2a_run(address: str, prompt: str, context_id: str) -> tuple[int, int]:
    """One A2A task of ``prompt`` in ``context_id``, read to its end over the
    A2A gRPC binding: (stream responses, echoes of the prompt in its text and
    thinking artifacts)."""
    request = a2a.SendMessageRequest(
        message=a2a.Message(
            message_id="bench", role=a2a.ROLE_USER, context_id=context_id,
            parts=[a2a.Part(text=prompt)],
        )
    )  # fmt: skip
    texts: dict[str, list[str]] = {}
    names: dict[str, str] = {}
    events = 0
    limit = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]
    async with grpc.aio.insecure_channel(address, options=limit) as channel:
        stub = a2a_pb2_grpc.A2AServiceStub(channel)  # type: ignore[no-untyped-call]
        async for response in stub.SendStreamingMessage(
            request, metadata=(("a2a-version", "1.0"),)
        ):
            events += 1
            if response.HasField("artifact_update"):
                artifact = response.artifact_update.artifact
                names[artifact.artifact_id] = artifact.name
                chunks = texts.setdefault(artifact.artifact_id, [])
                if not response.artifact_update.append:
                    chunks.clear()
                chunks.extend(part.text for part in artifact.parts)
    return events, _echoes(prompt, texts, names)


async def a2a_http_run(url: str, via: str, prompt: str, context_id: str) -> tuple[int, int]:
    """As ``a2a_run``, over the HTTP port's JSON-RPC (``a2a-jsonrpc``) or
    HTTP+JSON (``a2a-rest``) binding, read as SSE."""
    message = {
        "messageId": "bench", "role": "ROLE_USER", "contextId": context_id,
        "parts": [{"text": prompt}],
    }  # fmt: skip
    if via == "a2a-jsonrpc":
        target = url + "/a2a/jsonrpc"
        body = {
            "jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage",
            "params": {"message": message},
        }  # fmt: skip
    else:
        target, body = url + "/a2a/rest/message:stream", {"message": message}
    texts: dict[str, list[str]] = {}
    names: dict[str, str] = {}
    events = 0
    headers = {"A2A-Version": "1.0", "Accept": "text/event-stream"}
    async with (
        httpx.AsyncClient(timeout=None) as http,
        http.stream("POST", target, json=body, headers=headers) as response,
    ):
        response.raise_for_status()
        data: list[str] = []
        async for line in response.aiter_lines():
            if line.startswith("data:"):
                data.append(line[5:].lstrip())
                continue
            if line or not data:
                continue
            event = json.loads("\n".join(data))
            data.clear()
            events += 1
            result = event.get("result", event) if via == "a2a-jsonrpc" else event
            update = result.get("artifactUpdate")
            if update is None:
                continue
            artifact = update["artifact"]
            names[artifact["artifactId"]] = artifact.get("name", "")
            chunks = texts.setdefault(artifact["artifactId"], [])
            if not update.get("append"):
                chunks.clear()
            chunks.extend(part.get("text", "") for part in artifact["parts"])
    return events, _echoes(prompt, texts, names)


def _echoes(prompt: str, texts: dict[str, list[str]], names: dict[str, str]) -> int:
    """How many of the demo's text and thinking artifacts (their chunks joined)
    hold the prompt's echo: the A2A readers' count of the message carried."""
    shown = repr(prompt)
    return sum(
        shown in "".join(chunks)
        for artifact_id, chunks in texts.items()
        if names[artifact_id] in ("text", "thinking")
    )


# The HTTP port's URL of each server started for an --via a2a-* case.
HTTP_URLS: dict[int, str] = {}


def start_http_serve(data_dir: Path, flags: list[str]) -> Proc:
    """As ``scale_out.start_serve``, with the HTTP port (the A2A bindings) on."""
    cmd = [sys.executable, "-m", "omni_grpc", "serve", "--grpc-port", "0", "--http-port", "0",
           "--data-dir", str(data_dir), "--no-metrics", *flags]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    banner = ""
    for line in proc.stdout:
        banner += line
        if line.strip() == "omni-grpc ready":
            grpc_at = re.search(r"gRPC on grpc://(\S+)", banner)
            http_at = re.search(r"HTTP\S* on (http://[^/\s]+)", banner)
            assert grpc_at is not None and http_at is not None, banner
            HTTP_URLS[proc.pid] = http_at.group(1)
            return Proc(proc, grpc_at.group(1))
    raise RuntimeError(f"serve exited: {proc.wait()}")


async def one_case(
    server: Proc, mib: int, readers: int, timeline: bool, kind: str, via: str = "grpc"
) -> tuple[float, float, int, float, float, list[tuple[str, float]]]:
    """(baseline RSS, peak RSS) in MiB, the run's events, its seconds and the
    server's CPU seconds meanwhile, and,
    with ``timeline``, the growth in flight per large message (``in_flight``);
    raises if a reader missed anything."""
    prompt = prompt_of(mib, kind)
    async with AgentClient(server.address) as client:
        small = client.run("hi")
        sid = await small.session()
        before = [e async for e in small]
        base = rss_kib(server.process.pid, "VmRSS") / 1024
        joined = [asyncio.Event() for _ in range(readers - 1)]

        async def attach(joined: asyncio.Event) -> list[StreamEvent]:
            out: list[StreamEvent] = []
            running = False
            async for event in client.attach(sid, before[0].event_id):
                out.append(event)
                if event.event_id == before[-1].event_id:
                    joined.set()
                elif joined.is_set() and event.message is not None:
                    running = True
                elif running and event.is_task_end:
                    break
            return out

        watchers = [asyncio.create_task(attach(j)) for j in joined]
        await asyncio.gather(*(j.wait() for j in joined))
        samples: Samples = []
        arrivals: Arrivals = []
        watch = sampled(server.process.pid, samples) if timeline else contextlib.nullcontext(0.0)
        with watch as started:
            began, cpu = time.perf_counter(), cpu_seconds(server.process.pid)
            run = []
            a2a_events = 0
            if via.startswith("a2a"):
                if via == "a2a":
                    a2a_events, echoes = await a2a_run(server.address, prompt, sid)
                else:
                    url = HTTP_URLS[server.process.pid]
                    a2a_events, echoes = await a2a_http_run(url, via, prompt, sid)
                if echoes != 2:
                    raise RuntimeError(f"{mib} MiB over A2A: {echoes} echoes of the prompt, not 2")
            async for event in client.run(prompt, session_id=sid) if via == "grpc" else _none():
                run.append(event)
                message = event.message
                if timeline and message is not None and message.ByteSize() >= MiB:
                    arm = message.WhichOneof("payload") or "?"
                    arrivals.append((time.perf_counter() - started, arm))
            seconds = time.perf_counter() - began
            cpu = cpu_seconds(server.process.pid) - cpu
        seen = [run, *await asyncio.gather(*watchers)] if via == "grpc" else []
        if via != "grpc":
            # The A2A task is over; the Attach readers see its end on their own.
            seen = [*await asyncio.gather(*watchers)]
    for events in seen:
        kinds = [e.kind for e in events]
        if "@resync_required" in kinds or echoed(events, prompt) != 2:
            raise RuntimeError(f"{mib} MiB x {readers}: a reader missed events: {kinds[:20]}")
    peak = rss_kib(server.process.pid, "VmHWM") / 1024
    count = len(run) if via == "grpc" else a2a_events
    return base, peak, count, seconds, cpu, in_flight(samples, arrivals, base)


async def _none() -> AsyncIterator[StreamEvent]:
    return
    yield


@contextlib.contextmanager
def python_path(src: str | None) -> Iterator[None]:
    """Servers started inside run another tree's sources (``src``), if given."""
    if src is None:
        yield
        return
    before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = src
    try:
        yield
    finally:
        if before is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = before


def start_tree_serve(data_dir: Path, src: str | None, flags: list[str], http: bool = False) -> Proc:
    """A server from this tree, or (``src``) from another tree's sources."""
    with python_path(src):
        return start_http_serve(data_dir, flags) if http else start_serve(data_dir, *flags)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="1,8,16")
    parser.add_argument("--readers", default="1,10")
    parser.add_argument("--backends", default="memory,redis")
    parser.add_argument(
        "--also", default="60x1", help="more [BACKEND:]MIBxREADERS cases (memory by default)"
    )
    parser.add_argument(
        "--prompt", choices=("word", "words"), default="word", help="one long word, or a log"
    )
    parser.add_argument("--baseline-src", help="another tree's src/ for a 'before' server")
    parser.add_argument(
        "--via",
        choices=("grpc", "a2a", "a2a-jsonrpc", "a2a-rest"),
        default="grpc",
        help="the large run: Run, or an A2A task (gRPC, JSON-RPC or HTTP+JSON binding)",
    )
    parser.add_argument(
        "--timeline", action="store_true", help="also the growth while each large message is sent"
    )
    args = parser.parse_args()
    trees = [("before", args.baseline_src), ("after", None)] if args.baseline_src else [("", None)]
    cases = [
        (backend, int(mib), int(readers))
        for backend in args.backends.split(",")
        for mib in args.sizes.split(",")
        for readers in args.readers.split(",")
    ]
    for case in filter(None, args.also.split(",")):
        backend, _, size = case.rpartition(":")
        mib, readers = size.split("x")
        cases.append((backend or "memory", int(mib), int(readers)))
    tree_column = ("| tree ", "|---") if args.baseline_src else ("", "")
    print(
        f"{tree_column[0]}| backend | prompt MiB | readers | baseline RSS MiB | peak RSS MiB "
        "| growth MiB | growth / window | growth / message | run events | run seconds "
        "| server CPU s |"
    )
    print(f"{tree_column[1]}|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    flights: list[tuple[tuple[str, str, int, int], list[tuple[str, float]]]] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        redis = None
        try:
            n = 0
            for backend, mib, readers in cases:
                flags: list[str] = []
                if backend == "redis":
                    if redis is None:
                        (root / "redis").mkdir()
                        redis = start_redis(root / "redis")
                    flags = ["--redis-url", redis[1]]
                for tree, src in trees:
                    n += 1
                    http = args.via in ("a2a-jsonrpc", "a2a-rest")
                    server = start_tree_serve(root / f"serve-{n}", src, flags, http)
                    try:
                        base, peak, events, seconds, cpu, flight = await one_case(
                            server, mib, readers, args.timeline, args.prompt, args.via
                        )
                    finally:
                        server.stop()
                    flights.append(((tree, backend, mib, readers), flight))
                    growth = peak - base
                    print(
                        f"{f'| {tree} ' if tree else ''}| {backend} | {mib} | {readers} "
                        f"| {base:.0f} | {peak:.0f} | {growth:.0f} "
                        f"| {growth * MiB / WINDOW:.1f} | {growth / mib:.1f}x "
                        f"| {events} | {seconds:.1f} | {cpu:.1f} |",
                        flush=True,
                    )
        finally:
            if redis is not None:
                redis[0].terminate()
                redis[0].wait()
    if args.timeline:
        print(
            f"\n{tree_column[0]}| backend | prompt MiB | readers | message "
            "| growth MiB in flight | growth / message |"
        )
        print(f"{tree_column[1]}|---|---:|---:|---|---:|---:|")
        for (tree, backend, mib, readers), flight in flights:
            for arm, growth in flight:
                print(
                    f"{f'| {tree} ' if tree else ''}| {backend} | {mib} | {readers} | {arm} "
                    f"| {growth:.0f} | {growth / mib:.1f}x |"
                )


if __name__ == "__main__":
    asyncio.run(main())
