"""The Redis backend under load, beside the memory backend (issue #29).

Per replica, ``--sessions`` sessions are held open at once (each a worker
that runs one paced task after another, a new session each time), and
``--rate`` new runs per second arrive on top, spread over the replicas, for
``--seconds``. Every run is read to its end and checked: status OK, its
closing ``task_state idle``, strictly increasing event ids, no
``resync_required``, and every event the demo engine says (the same kinds
as a run read alone). redis-server's ``connected_clients`` and
``blocked_clients`` are sampled throughout; their peaks are the replicas'
Redis connections. The memory backend runs the same load on one replica.

Every server is a real subprocess (``omni-grpc serve``, ``redis-server`` with
AOF and ``appendfsync always``). Exits 1 when any run failed or lost events.

    .venv/bin/python benchmarks/redis_load.py [--replicas 1,3] [--sessions 200]
        [--rate 50] [--seconds 60]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import itertools
import os
import shlex
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import redis.asyncio as aioredis
from google.rpc import error_details_pb2
from grpc_status import rpc_status
from scale_out import Proc, start_redis, start_serve  # benchmarks/scale_out.py, beside this file

from omni_grpc_proto.omni.v1 import agent_service_pb2 as pb
from omni_grpc_proto.omni.v1 import agent_service_pb2_grpc


@dataclass
class Tally:
    runs: int = 0
    failed: collections.Counter[str] = field(default_factory=collections.Counter)
    lost: int = 0
    events: int = 0
    # Runs refused before any event (RESOURCE_EXHAUSTED past --max-runs):
    # told with their status; they must leave no session behind.
    refused: int = 0
    # Sessions the runs saw (each Run makes one), and those ListSessions
    # lists at the end: equal when nothing was left behind by a refusal.
    seen_sessions: set[str] = field(default_factory=set)
    listed_sessions: int = 0
    peak_clients: int = 0
    # The most connections one replica held (by client name, one per process).
    peak_per_replica: int = 0
    peak_blocked: int = 0
    missed_samples: int = 0
    # Seconds from each Run's call to its first event, and to its end.
    first: list[float] = field(default_factory=list)
    whole: list[float] = field(default_factory=list)
    # Seconds from a refused Run's call to its status (told at once or not),
    # and the refusals by reason (the status's ErrorInfo).
    refused_in: list[float] = field(default_factory=list)
    refusals: collections.Counter[str] = field(default_factory=collections.Counter)


# One detail per failing status, and when each failure came, for the report.
DETAILS: dict[str, str] = {}
FAILED_AT: list[float] = []

# A run not ended by then is counted as hung (a failure), not waited for.
RUN_DEADLINE = 120.0


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of a live process (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def kind_of(response: pb.RunResponse) -> str:
    if response.WhichOneof("kind") == "message":
        return str(response.message.WhichOneof("payload"))
    return str(response.event.WhichOneof("kind"))


# (status, kinds seen, ids strictly increasing, seconds to the first event,
# seconds to the end, the session id seen, and for a refusal the reason and
# retry delay its status carries).
Result = tuple[str, list[str], bool, float, float, str, tuple[str, float] | None]


def refusal_of(exc: grpc.aio.AioRpcError) -> tuple[str, float]:
    """(ErrorInfo reason, RetryInfo delay in seconds or 0) of a status."""
    status = rpc_status.from_call(exc)
    reason, delay = "", 0.0
    for detail in status.details if status is not None else []:
        info = error_details_pb2.ErrorInfo()
        retry = error_details_pb2.RetryInfo()
        if detail.Unpack(info):
            reason = info.reason
        elif detail.Unpack(retry):
            delay = retry.retry_delay.ToTimedelta().total_seconds()
    return reason or "no ErrorInfo", delay


async def one_run(stub: agent_service_pb2_grpc.AgentServiceStub) -> Result:
    """The run read to its end (``Result``)."""
    kinds: list[str] = []
    session = ""
    last = -1
    ordered = True
    start = time.monotonic()
    first = float("nan")
    refusal: tuple[str, float] | None = None

    async def read() -> str:
        nonlocal last, ordered, first, session, refusal
        try:
            async for response in stub.Run(pb.RunRequest(prompt="load")):
                if not kinds:
                    first = time.monotonic() - start
                    session = response.session_id
                seq = int(response.event_id.rsplit("-", 1)[1])
                ordered = ordered and seq > last
                last = seq
                kinds.append(kind_of(response))
                ev = response.event
                if (
                    response.WhichOneof("kind") == "event"
                    and ev.WhichOneof("kind") == "task_state"
                    and ev.task_state.state == pb.SESSION_STATE_IDLE
                ):
                    return "OK"
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and not kinds:
                refusal = refusal_of(exc)
            else:
                DETAILS.setdefault(exc.code().name, f"{exc.details()} {exc.debug_error_string()}")
            return str(exc.code().name)
        return "ENDED_EARLY"

    try:
        status = await asyncio.wait_for(read(), RUN_DEADLINE)
    except TimeoutError:
        status = "HUNG"
    return status, kinds, ordered, first, time.monotonic() - start, session, refusal


async def load(
    addresses: list[str], sessions: int, rate: float, seconds: float, redis_url: str | None
) -> Tally:
    tally = Tally()
    channels = [grpc.aio.insecure_channel(a) for a in addresses]
    stubs = [agent_service_pb2_grpc.AgentServiceStub(c) for c in channels]
    _, expected, _, _, _, session, _ = await one_run(stubs[0])
    tally.seen_sessions.add(session)
    end = time.monotonic() + seconds

    def account(result: Result) -> None:
        status, kinds, ordered, first, whole, session, refusal = result
        if session:
            tally.seen_sessions.add(session)
        if refusal is not None:
            tally.refused += 1
            tally.refused_in.append(whole)
            tally.refusals[refusal[0]] += 1
            return
        tally.runs += 1
        if status != "OK":
            FAILED_AT.append(time.monotonic())
        if first == first:  # not NaN: the run saw an event
            tally.first.append(first)
        tally.whole.append(whole)
        tally.events += len(kinds)
        if status != "OK":
            tally.failed[status] += 1
        elif kinds != expected or not ordered or "resync_required" in kinds:
            tally.lost += 1

    async def held(stub: agent_service_pb2_grpc.AgentServiceStub) -> None:
        while time.monotonic() < end:
            result = await one_run(stub)
            account(result)
            refusal = result[6]
            if refusal is not None:
                # A refused client backs off as the status says (RetryInfo),
                # or a little.
                await asyncio.sleep(refusal[1] or 0.1)

    async def arrivals() -> None:
        started: list[asyncio.Task[None]] = []
        cycle = itertools.cycle(stubs)
        count = 0
        t0 = time.monotonic()
        while (now := time.monotonic()) < end:
            due = int((now - t0) * rate) - count
            for _ in range(due):
                stub = next(cycle)
                started.append(asyncio.create_task(one_arrival(stub)))
                count += 1
            await asyncio.sleep(0.02)  # the arrival clock's tick
        await asyncio.gather(*started)

    async def one_arrival(stub: agent_service_pb2_grpc.AgentServiceStub) -> None:
        account(await one_run(stub))

    async def sample() -> None:
        if redis_url is None:
            return
        admin = aioredis.Redis.from_url(redis_url)
        try:
            while time.monotonic() < end + 1:
                try:
                    info = await admin.info("clients")
                    clients = await admin.client_list()
                except aioredis.RedisError:  # an overloaded Redis: the next sample
                    tally.missed_samples += 1
                    continue
                # The sampler's own connection is not the replicas'.
                tally.peak_clients = max(tally.peak_clients, int(info["connected_clients"]) - 1)
                tally.peak_blocked = max(tally.peak_blocked, int(info["blocked_clients"]))
                names = collections.Counter(
                    c["name"] for c in clients if c.get("name", "").startswith("omni-grpc")
                )
                tally.peak_per_replica = max([tally.peak_per_replica, *names.values()])
                await asyncio.sleep(0.25)  # the sampling period
        finally:
            await admin.aclose()

    workers = [held(stub) for stub in stubs for _ in range(sessions)]
    await asyncio.gather(sample(), arrivals(), *workers)
    listed = await stubs[0].ListSessions(pb.ListSessionsRequest())
    tally.listed_sessions = len(listed.sessions)
    for channel in channels:
        await channel.close()
    return tally


def run_case(
    backend: str, replicas: int, args: argparse.Namespace, workdir: Path
) -> tuple[Tally, float, float, float]:
    """The tally, the seconds it took, and the CPU seconds the replicas and
    redis-server spent (where the time goes on a shared machine)."""
    data = workdir / f"{backend}-{replicas}"
    data.mkdir()
    redis_proc = None
    url = None
    extra = ["--pacing", str(args.pacing), "--max-sessions", "1000000"]
    if args.max_runs is not None:
        extra += ["--max-runs", str(args.max_runs)]
    extra += shlex.split(args.serve_args)
    if backend == "redis":
        (data / "redis").mkdir()
        redis_proc, url = start_redis(data / "redis")
        extra += ["--redis-url", url]
    servers: list[Proc] = [start_serve(data / "serve", *extra) for _ in range(replicas)]
    try:
        start = time.monotonic()
        tally = asyncio.run(
            load([s.address for s in servers], args.sessions, args.rate, args.seconds, url)
        )
        took = time.monotonic() - start
        serve_cpu = sum(cpu_seconds(s.process.pid) for s in servers)
        redis_cpu = cpu_seconds(redis_proc.pid) if redis_proc is not None else 0.0
        return tally, took, serve_cpu, redis_cpu
    finally:
        for server in servers:
            server.stop()
        if redis_proc is not None:
            redis_proc.terminate()
            redis_proc.wait(10)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", default="1,3", help="replica counts on Redis (default 1,3)")
    parser.add_argument("--sessions", type=int, default=200, help="held sessions per replica")
    parser.add_argument("--rate", type=float, default=50.0, help="new runs per second, in all")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--pacing", type=float, default=0.05, help="demo engine pacing")
    parser.add_argument(
        "--max-runs",
        type=int,
        default=None,
        help="each replica's --max-runs (default: serve's); runs past it are refused",
    )
    parser.add_argument("--serve-args", default="", help="more options for every serve")
    parser.add_argument("--no-memory", action="store_true", help="skip the memory baseline")
    args = parser.parse_args()
    cases = [] if args.no_memory else [("memory", 1)]
    cases += [("redis", int(n)) for n in args.replicas.split(",")]
    print(
        f"load: {args.sessions} held sessions per replica, {args.rate:g} new runs/s, "
        f"{args.seconds:g} s, pacing {args.pacing:g} s"
    )
    print(
        "| backend | replicas | runs | events | failed | lost "
        "| Redis connections (peak) | blocked (peak) | runs/s "
        "| refused | sessions left behind | connections per replica (peak) "
        "| first event p50 / p99 (s) | run p50 / p99 (s) "
        "| CPU ms per run: replicas / redis-server | refusal told in p50 / p99 (s) |"
    )
    print("| --- |" + " ---: |" * 15)
    bad = False
    with tempfile.TemporaryDirectory() as tmp:
        for backend, replicas in cases:
            load_avg = os.getloadavg()[0]
            t0 = time.monotonic()
            DETAILS.clear()
            FAILED_AT.clear()
            tally, took, serve_cpu, redis_cpu = run_case(backend, replicas, args, Path(tmp))
            failed = sum(tally.failed.values())
            left = tally.listed_sessions - len(tally.seen_sessions)
            bad = bad or failed > 0 or tally.lost > 0 or left != 0
            conns = f"{tally.peak_clients}" if backend == "redis" else "-"
            blocked = f"{tally.peak_blocked}" if backend == "redis" else "-"
            print(
                f"| {backend} | {replicas} | {tally.runs} | {tally.events} | {failed} "
                f"| {tally.lost} | {conns} | {blocked} | {tally.runs / took:.1f} "
                f"| {tally.refused} | {left} "
                f"| {tally.peak_per_replica if backend == 'redis' else '-'} "
                f"| {percentile(tally.first, 0.5):.2f} / {percentile(tally.first, 0.99):.2f} "
                f"| {percentile(tally.whole, 0.5):.2f} / {percentile(tally.whole, 0.99):.2f} "
                f"| {1000 * serve_cpu / max(1, tally.runs):.0f} "
                f"/ {1000 * redis_cpu / max(1, tally.runs):.0f} "
                f"| {percentile(tally.refused_in, 0.5):.2f} "
                f"/ {percentile(tally.refused_in, 0.99):.2f} |"
            )
            print(f"  {took:.0f} s, load average {load_avg:.1f} at the start")
            if tally.refusals:
                print(f"  refused by reason: {dict(tally.refusals)}")
            if tally.failed:
                print(f"  failures: {dict(tally.failed)}")
                for code, detail in DETAILS.items():
                    print(f"  {code}: {detail}")
                if FAILED_AT:
                    print(
                        f"  failures came from {min(FAILED_AT) - t0:.0f} s "
                        f"to {max(FAILED_AT) - t0:.0f} s"
                    )
                DETAILS.clear()
                FAILED_AT.clear()
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
