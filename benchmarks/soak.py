"""Load and fault suite: a real ``omni-grpc serve`` on loopback, driven hard.

Scenarios (each bounded in count and time, loopback only):

* ``load``: N concurrent gRPC ``Run`` streams and M reference SSE readers (each
  its own session), all at once. Every stream is checked: event ids in order,
  fragments complete (the validator over the stream), and the session's trace
  byte-identical to the stream's recordable messages.
* ``slow``: one slow reader per transport on a small buffer. The gRPC reader
  gets either the whole run or ``resync_required`` (then ``GetHistory`` must be
  the whole trace); the dialect reader gets either the whole reply (equal to the
  trace's text) or ``error`` and a ``done`` that does not say ``completed``.
* ``kill``: runs in flight, ``kill -9``, restart on the same data dir: every
  trace validates, ``message_count`` matches, each session takes a new run.
* ``disk``: the data dir on a small tmpfs (needs root): fill it mid-run, the
  run fails with ``RESOURCE_EXHAUSTED`` and health is ``NOT_SERVING``; free it,
  the next run works, every trace validates.

``tests/soak/test_soak.py`` runs all four at small sizes in CI; the figures in
BENCHMARKS.md come from the full sizes:

    .venv/bin/python benchmarks/soak.py [--grpc 200] [--sse 100] [--repeat 2]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import httpx
from grpc_health.v1 import health_pb2, health_pb2_grpc

from omni_grpc.client.sse import read_reference
from omni_grpc.convert import message_to_dict, serialize_message
from omni_grpc.trace.resume import read_trace
from omni_grpc.trace.validate import TraceValidator
from omni_grpc_proto.omni.v1 import agent_service_pb2 as pb
from omni_grpc_proto.omni.v1 import agent_service_pb2_grpc, omni_pb2

_GRPC_LINE = re.compile(r"gRPC on grpcs?://(\S+)")
_HTTP_LINE = re.compile(r"HTTP\S* on (https?://[^/\s]+)")


# ---- the server under test -------------------------------------------------------


@dataclass
class Served:
    proc: subprocess.Popen[str]
    grpc: str
    http: str
    data_dir: Path

    def rss_peak_kib(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
        return 0


def start(data_dir: Path, *args: str) -> Served:
    cmd = [sys.executable, "-m", "omni_grpc", "serve", "--grpc-port", "0", "--http-port", "0"]
    cmd += ["--data-dir", str(data_dir), "--sse-heartbeat", "0", *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    banner = ""
    for line in proc.stdout:
        banner += line
        if line.strip() == "omni-grpc ready":
            grpc_match, http_match = _GRPC_LINE.search(banner), _HTTP_LINE.search(banner)
            assert grpc_match and http_match, banner
            return Served(proc, grpc_match.group(1), http_match.group(1), data_dir)
    raise RuntimeError(f"serve exited: {proc.stderr.read() if proc.stderr else ''}")


def stop(served: Served, *, kill: bool = False) -> None:
    if served.proc.poll() is None:
        served.proc.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
    try:
        served.proc.wait(30)
    except subprocess.TimeoutExpired:
        served.proc.kill()
        served.proc.wait()
    for pipe in (served.proc.stdout, served.proc.stderr):
        if pipe is not None:
            pipe.close()


# ---- checks --------------------------------------------------------------------------


@dataclass
class Report:
    name: str
    streams: int = 0
    events: int = 0
    seconds: float = 0.0
    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def fail(self, what: str) -> None:
        self.failures.append(what)

    @property
    def ok(self) -> bool:
        return not self.failures


def shard_of(data_dir: Path, session_id: str) -> Path:
    shards = sorted((data_dir / "traces").glob(f"*/{session_id}_*.jsonl"))
    assert shards, f"no trace for {session_id}"
    return shards[-1]


def trace_problems(path: Path) -> list[str]:
    """Errors and warnings ``omni-grpc validate`` would print, and torn lines."""
    records, skipped = read_trace(path)
    problems = [f"line {s.line}: malformed ({s.reason})" for s in skipped]
    validator = TraceValidator(trace=True)
    for line, record in enumerate(records, 1):
        problems += [f"line {i.line}: {i.message}" for i in validator.check(line, record)]
    problems += [f"line {i.line}: {i.message}" for i in validator.finish()]
    return problems


def check_stream(
    report: Report,
    label: str,
    ids: Sequence[str],
    messages: Sequence[omni_pb2.OmniMessage],
    data_dir: Path,
    session_id: str,
) -> None:
    """Ids in order, fragments complete, and the trace equal to the stream."""
    epochs = {i.rsplit("-", 1)[0] for i in ids}
    seqs = [int(i.rsplit("-", 1)[1]) for i in ids]
    if len(epochs) != 1 or any(b <= a for a, b in itertools.pairwise(seqs)):
        report.fail(f"{label}: event ids out of order")
    validator = TraceValidator(trace=False)
    issues = [i for n, m in enumerate(messages, 1) for i in validator.check(n, message_to_dict(m))]
    errors = [i for i in issues + validator.finish() if i.severity == "error"]
    if errors:
        report.fail(f"{label}: stream violates the protocol: {errors[0].message}")
    recordable = [
        serialize_message(m)
        for m in messages
        if not (m.WhichOneof("payload") or "").startswith("partial_") and not m.origin
    ]
    lines = shard_of(data_dir, session_id).read_bytes().splitlines()
    if lines[1:] != recordable:  # the trace starts with session_meta, never streamed
        report.fail(
            f"{label}: trace differs from the stream ({len(lines) - 1} vs {len(recordable)})"
        )


# ---- scenario: load -------------------------------------------------------------------


async def grpc_stream(stub: Any, report: Report, data_dir: Path, label: str, prompt: str) -> int:
    ids: list[str] = []
    messages: list[omni_pb2.OmniMessage] = []
    session_id = ""
    async for response in stub.Run(pb.RunRequest(prompt=prompt)):
        session_id = response.session_id
        ids.append(response.event_id)
        if response.HasField("message"):
            messages.append(response.message)
        elif response.event.WhichOneof("kind") == "resync_required":
            report.fail(f"{label}: cut off (resync_required)")
    check_stream(report, label, ids, messages, data_dir, session_id)
    return len(ids)


async def sse_stream(http: httpx.AsyncClient, report: Report, data_dir: Path, label: str) -> int:
    created = await http.post("/api/sessions", json={})
    session_id = created.json()["session"]["sessionId"]
    ids: list[str] = []
    messages: list[omni_pb2.OmniMessage] = []
    connected = asyncio.Event()

    async def watch() -> None:
        async for item in read_reference(
            http, f"/api/sessions/{session_id}/stream", until_idle=True
        ):
            connected.set()
            ids.append(item.event_id)
            if item.message is not None:
                messages.append(item.message)
            elif item.server_event_kind == "resync_required":
                report.fail(f"{label}: cut off (resync_required)")

    watcher = asyncio.create_task(watch())
    await connected.wait()
    started = await http.post(
        f"/api/sessions/{session_id}/tasks", json={"input": [{"type": "text", "text": label}]}
    )
    if started.status_code != 202:
        report.fail(f"{label}: task refused {started.status_code}")
        watcher.cancel()
        return 0
    await watcher
    # ids[0] is the connect-time task_state, sent to this reader only.
    check_stream(report, label, ids[1:], messages, data_dir, session_id)
    return len(ids)


async def load(served: Served, grpc_streams: int, sse_readers: int) -> Report:
    report = Report(f"load: {grpc_streams} gRPC Run + {sse_readers} SSE readers")
    limits = httpx.Limits(max_connections=sse_readers * 2 + 10)
    began = time.perf_counter()
    async with (
        grpc.aio.insecure_channel(served.grpc) as channel,
        httpx.AsyncClient(base_url=served.http, timeout=120, limits=limits) as http,
    ):
        stub = agent_service_pb2_grpc.AgentServiceStub(channel)
        jobs = [
            grpc_stream(stub, report, served.data_dir, f"grpc-{i}", f"g{i}")
            for i in range(grpc_streams)
        ]
        jobs += [sse_stream(http, report, served.data_dir, f"sse-{i}") for i in range(sse_readers)]
        counts = await asyncio.gather(*jobs, return_exceptions=True)
    report.seconds = time.perf_counter() - began
    for count in counts:
        if isinstance(count, BaseException):
            report.fail(f"a stream raised {type(count).__name__}: {count}")
        else:
            report.events += count
            report.streams += 1
    return report


# ---- scenario: a slow reader per transport ----------------------------------------------


async def slow_readers(served: Served) -> Report:
    """Run against a server started with a small --buffer-events."""
    report = Report("slow: one slow reader per transport")
    began = time.perf_counter()
    async with grpc.aio.insecure_channel(served.grpc) as channel:
        stub = agent_service_pb2_grpc.AgentServiceStub(channel)
        call = stub.Run(pb.RunRequest(prompt="slow grpc"))
        seen, cut, session_id = 0, False, ""
        async for response in call:
            session_id = response.session_id
            seen += 1
            if response.event.WhichOneof("kind") == "resync_required":
                cut = True
            await asyncio.sleep(0.002)  # the slow part: a reader that dawdles
        history = [m async for m in stub.GetHistory(pb.GetHistoryRequest(session_id=session_id))]
        lines = shard_of(served.data_dir, session_id).read_bytes().splitlines()
        if [serialize_message(h.message) for h in history] != lines:
            report.fail("slow gRPC reader: GetHistory differs from the trace")
        report.notes.append(
            f"gRPC: {seen} events, {'cut off, resynced from history' if cut else 'got all'}"
        )
        report.events += seen
    async with httpx.AsyncClient(base_url=served.http, timeout=120) as http:
        events = []
        async with http.stream("POST", "/v1/runs", json={"prompt": "slow dialect"}) as response:
            session_id = response.headers["omni-session-id"]
            buffered = b""
            async for chunk in response.aiter_bytes(512):
                buffered += chunk
                await asyncio.sleep(0.002)
        for block in buffered.split(b"\n\n"):
            fields = dict(line.split(b": ", 1) for line in block.split(b"\n") if b": " in line)
            if b"event" in fields:
                events.append((fields[b"event"].decode(), fields[b"data"]))
        names = [n for n, _ in events]
        done = events[-1][1] if events else b""
        text = "".join(json.loads(d)["delta"] for n, d in events if n == "message")
        completed = b'"status":"completed"' in done
        records, _ = read_trace(shard_of(served.data_dir, session_id))
        replies = [
            r["payload"]["text"]
            for r in records
            if r["payload"].get("type") == "text" and r["payload"].get("role") == "assistant"
        ]
        if names[-1:] != ["done"]:
            report.fail("slow dialect reader: no done")
        elif completed and text != "\n\n".join(replies):
            report.fail("slow dialect reader: done completed with text missing")
        elif not completed and "error" not in names:
            report.fail("slow dialect reader: not completed and no error event")
        report.notes.append(
            f"dialect: {len(events)} events, {'got all' if completed else 'error + done failed'}"
        )
        report.events += len(events)
    report.streams = 2
    report.seconds = time.perf_counter() - began
    return report


# ---- scenario: kill -9 and restart --------------------------------------------------------


async def kill_and_restart(data_dir: Path, runs: int) -> Report:
    report = Report(f"kill: {runs} runs in flight, kill -9, restart")
    began = time.perf_counter()
    served = start(data_dir, "--pacing", "0.01")
    sessions: list[str] = []
    try:
        async with grpc.aio.insecure_channel(served.grpc) as channel:
            stub = agent_service_pb2_grpc.AgentServiceStub(channel)
            calls = [stub.Run(pb.RunRequest(prompt=f"k{i}")) for i in range(runs)]
            for call in calls:  # each run is under way (its first events arrived)
                for _ in range(3):
                    response = await call.read()
                    sessions.append(response.session_id)
            stop(served, kill=True)
    finally:
        stop(served, kill=True)
    served = start(data_dir)
    try:
        async with grpc.aio.insecure_channel(served.grpc) as channel:
            stub = agent_service_pb2_grpc.AgentServiceStub(channel)
            for session_id in sorted(set(sessions)):
                responses = [
                    r async for r in stub.Run(pb.RunRequest(prompt="again", session_id=session_id))
                ]
                if responses[-1].event.task_state.state != pb.SESSION_STATE_IDLE:
                    report.fail(f"{session_id}: the run after the restart did not finish")
                report.events += len(responses)
            for info in (await stub.ListSessions(pb.ListSessionsRequest())).sessions:
                records, _ = read_trace(shard_of(data_dir, info.session_id))
                if info.message_count != len(records):
                    report.fail(
                        f"{info.session_id}: message_count {info.message_count} != {len(records)}"
                    )
    finally:
        stop(served)
    for session_id in sorted(set(sessions)):
        for problem in trace_problems(shard_of(data_dir, session_id))[:1]:
            report.fail(f"{session_id}: {problem}")
    report.streams = len(set(sessions))
    report.seconds = time.perf_counter() - began
    return report


# ---- scenario: disk full --------------------------------------------------------------------


@contextlib.contextmanager
def small_tmpfs(size: str = "8m") -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as parent:
        mountpoint = Path(parent) / "disk"
        mountpoint.mkdir()
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mountpoint)],
            check=True,
            capture_output=True,
        )
        try:
            yield mountpoint
        finally:
            subprocess.run(["umount", "-l", str(mountpoint)], check=False)


def fill(path: Path) -> Path:
    filler = path / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for size in (1 << 20, 4096, 1):
            while True:
                try:
                    os.write(fd, b"\0" * size)
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
    finally:
        os.close(fd)
    return filler


async def disk_full(mountpoint: Path) -> Report:
    report = Report("disk: data dir on a full tmpfs, then freed")
    began = time.perf_counter()
    served = start(mountpoint / "data", "--engine-opt", "repeat=60")
    try:
        async with grpc.aio.insecure_channel(served.grpc) as channel:
            stub = agent_service_pb2_grpc.AgentServiceStub(channel)
            health = health_pb2_grpc.HealthStub(channel)
            first = [r async for r in stub.Run(pb.RunRequest(prompt="before"))]
            session_id = first[0].session_id
            filler = fill(mountpoint)
            try:
                async for _ in stub.Run(pb.RunRequest(prompt="full", session_id=session_id)):
                    pass
                report.fail("the run on a full disk ended OK")
            except grpc.aio.AioRpcError as exc:
                if exc.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
                    report.fail(f"full disk: {exc.code().name}, not RESOURCE_EXHAUSTED")
            status = (await health.Check(health_pb2.HealthCheckRequest())).status
            if status != health_pb2.HealthCheckResponse.NOT_SERVING:
                report.fail("health stayed SERVING on a full disk")
            filler.unlink()
            after = [
                r async for r in stub.Run(pb.RunRequest(prompt="after", session_id=session_id))
            ]
            if after[-1].event.task_state.state != pb.SESSION_STATE_IDLE:
                report.fail("the run after freeing space did not finish")
            status = (await health.Check(health_pb2.HealthCheckRequest())).status
            if status != health_pb2.HealthCheckResponse.SERVING:
                report.fail("health did not come back after freeing space")
            report.events = len(first) + len(after)
    finally:
        stop(served)
    for problem in trace_problems(shard_of(mountpoint / "data", session_id))[:1]:
        report.fail(f"trace after the full disk: {problem}")
    report.streams = 3
    report.seconds = time.perf_counter() - began
    return report


# ---- the driver ------------------------------------------------------------------------------


async def run_all(grpc_streams: int, sse_readers: int, repeat: int, disk: bool) -> list[Report]:
    reports = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        served = start(root / "load", "--engine-opt", f"repeat={repeat}")
        try:
            report = await load(served, grpc_streams, sse_readers)
            report.notes.append(f"server peak RSS {served.rss_peak_kib() / 1024:.0f} MiB")
            reports.append(report)
        finally:
            stop(served)
        served = start(root / "slow", "--engine-opt", "repeat=40", "--buffer-events", "300")
        try:
            reports.append(await slow_readers(served))
        finally:
            stop(served)
        reports.append(await kill_and_restart(root / "kill", max(4, grpc_streams // 20)))
    if disk:
        with small_tmpfs() as mountpoint:
            reports.append(await disk_full(mountpoint))
    return reports


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--grpc", type=int, default=200, help="concurrent gRPC Run streams")
    parser.add_argument("--sse", type=int, default=100, help="concurrent reference SSE readers")
    parser.add_argument("--repeat", type=int, default=2, help="demo engine: answer repeats")
    parser.add_argument("--no-disk", action="store_true", help="skip the tmpfs scenario")
    args = parser.parse_args()
    reports = asyncio.run(run_all(args.grpc, args.sse, args.repeat, not args.no_disk))
    for report in reports:
        rate = report.events / report.seconds if report.seconds else 0.0
        status = "ok" if report.ok else f"FAILED ({len(report.failures)})"
        print(f"{report.name}: {status}")
        print(
            f"  {report.streams} streams, {report.events} events in {report.seconds:.1f} s "
            f"({rate:,.0f} events/s)"
        )
        for note in report.notes:
            print(f"  {note}")
        for failure in report.failures[:10]:
            print(f"  - {failure}")
    return 0 if all(r.ok for r in reports) else 1


if __name__ == "__main__":
    sys.exit(main())
