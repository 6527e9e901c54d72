"""Run leases under pressure: live replicas must keep their runs (#40).

Three ``omni-grpc serve`` replicas on one redis-server (AOF, ``appendfsync
always``) and one data dir, ``--owner-loss-timeout 2``, beside CPU-bound
processes and fsync-heavy disk writers (started and stopped here, each
bounded in time by itself too). Clients keep runs going on every replica
(demo engine, paced so a run lasts a few seconds) while faults are injected:

* ``redis``: redis-server is killed (SIGKILL) and started again on its AOF;
* ``rolling``: each replica in turn gets SIGTERM (it drains) and a new one
  starts in its place;
* ``sigkill``: a replica is killed (SIGKILL) every ``--kill-every`` seconds
  and a new one started in its place (the soak).

Every run is followed to its end (a client whose replica went away attaches
again, with its last event id, on another one) and classed by how it ended:
completed, or aborted and why. A run aborted as *replica X stopped renewing
its run lease* whose X was never killed is a **live replica's lost run**: the
goal is 0. Printed: the runs per class, the close times after each fault
(from the SIGKILL, or from Redis answering again, to the client's ``task_state
idle``) against the documented bound, the replicas' memory (RSS) over the run,
and the machine's load average. Exits 1 when a live replica lost a run, a
close missed its bound plus ``--slack``, a run did not end, or a replica's
memory grew by more than ``--memory-growth`` MB.

    .venv/bin/python benchmarks/lease_pressure.py [--phases redis,rolling,sigkill]
        [--cpu 4] [--disk 4] [--workers 12] [--soak-minutes 10] [--kill-every 60]

``tests/test_lease_pressure.py`` runs it at a small size in CI; the figures in
BENCHMARKS.md come from the full sizes.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import grpc
from durable_chaos import Redis  # benchmarks/durable_chaos.py, beside this file

from omni_grpc_proto.omni.v1 import agent_service_pb2 as pb
from omni_grpc_proto.omni.v1 import agent_service_pb2_grpc

# The owner-loss timeout of the report: the tightest the guide allows.
OWNER_LOSS = 2.0
NOT_STARTED = (
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.INTERNAL,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.UNKNOWN,
)
LOST = re.compile(r"replica \S+?-(\d+)-[0-9a-f]{6} stopped renewing its run lease")

# A CPU hog and an fsync-heavy writer, each ending by itself after its time.
CPU_HOG = "import sys,time\nend=time.time()+float(sys.argv[1])\nwhile time.time()<end: pass\n"
DISK_HOG = """import os,sys,time
end=time.time()+float(sys.argv[1]); path=sys.argv[2]; block=os.urandom(1<<16)
fd=os.open(path, os.O_WRONLY|os.O_CREAT|os.O_TRUNC, 0o600)
n=0
while time.time()<end:
    os.write(fd, block); os.fsync(fd); n+=1
    if n % 256 == 0: os.ftruncate(fd, 0); os.lseek(fd, 0, 0)
os.close(fd); os.unlink(path)
"""


@dataclass
class Replica:
    process: subprocess.Popen[str]
    address: str

    @property
    def pid(self) -> int:
        return self.process.pid

    def rss_mb(self) -> float | None:
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        return None


@dataclass
class Outcome:
    replica: int  # the pid of the replica the run started on
    kind: str  # completed | lost-live | lost-dead | store | shutdown | other:<reason>
    ended: float  # time.monotonic() of the client's task_state idle
    reason: str = ""


class Cluster:
    def __init__(self, root: Path, engine_repeat: int, src: Path | None, owner_loss: float) -> None:
        self.root = root
        self.owner_loss = owner_loss
        self.src = src
        self.redis = Redis(root / "redis", start_tries=1500)
        self.replicas: list[Replica] = []
        self.killed: set[int] = set()
        self.stuck_drains = 0
        self.stopped: set[int] = set()  # SIGTERMed (drained) by the rolling restart
        self.repeat = engine_repeat
        self.logs: list[Path] = []
        self.channels: dict[str, grpc.aio.Channel] = {}

    def start_replica(self) -> Replica:
        log = self.root / f"replica-{len(self.logs)}.log"
        self.logs.append(log)
        cmd = [sys.executable, "-m", "omni_grpc", "serve", "--grpc-port", "0", "--no-http",
               "--no-metrics", "--data-dir", str(self.root / "data"),
               "--redis-url", self.redis.url, "--owner-loss-timeout", str(self.owner_loss),
               "--pacing", "0.05", "--engine-opt", f"repeat={self.repeat}",
               "--drain-timeout", "30"]  # fmt: skip
        # Resumption off: a run taken over is then closed with the name of the
        # replica that stopped renewing, which is how runs are classed here
        # (lost-live / lost-dead); resumed, a live replica's lost run would
        # pass as completed. By environment, which a baseline's older CLI ignores.
        env = dict(os.environ, OMNI_RESUME_RUNS="0")
        if self.src is not None:  # the replicas of another checkout (a baseline)
            env["PYTHONPATH"] = os.pathsep.join([str(self.src), env.get("PYTHONPATH", "")])
        with log.open("ab") as stderr:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=stderr, text=True, env=env)
        assert proc.stdout is not None
        address = None
        for line in proc.stdout:
            if match := re.search(r"gRPC on grpc://(\S+)", line):
                address = match.group(1)
            if line.strip() == "omni-grpc ready" and address is not None:
                replica = Replica(proc, address)
                self.replicas.append(replica)
                return replica
        raise RuntimeError(f"serve exited: {proc.wait()}")

    def live(self) -> list[Replica]:
        return [r for r in self.replicas if r.process.poll() is None and r.pid not in self.killed]

    def stub(self, replica: Replica) -> agent_service_pb2_grpc.AgentServiceStub:
        channel = self.channels.get(replica.address)
        if channel is None:
            channel = self.channels[replica.address] = grpc.aio.insecure_channel(replica.address)
        return agent_service_pb2_grpc.AgentServiceStub(channel)

    def tracebacks(self) -> int:
        return sum(log.read_text(errors="replace").count("Traceback") for log in self.logs)

    def log_count(self, text: str) -> int:
        return sum(log.read_text(errors="replace").count(text) for log in self.logs)

    async def close(self) -> None:
        for channel in self.channels.values():
            await channel.close()
        for replica in self.replicas:
            if replica.process.poll() is None:
                replica.process.kill()
                replica.process.wait()
        self.redis.kill()


def _end_of(response: pb.RunResponse | pb.AttachResponse) -> tuple[bool, str | None]:
    """(is this the run's closing idle, the abort reason if it is an abort)."""
    if response.WhichOneof("kind") == "message":
        if response.message.WhichOneof("payload") == "abort":
            return False, response.message.abort.reason
        return False, None
    event = response.event
    idle = event.WhichOneof("kind") == "task_state" and event.task_state.state == (
        pb.SESSION_STATE_IDLE
    )
    return idle, None


async def one_run(cluster: Cluster, index: int, deadline: float) -> Outcome | None:
    """A run on a live replica, followed to its end across replicas."""
    live = cluster.live()
    if not live:
        await asyncio.sleep(0.2)
        return None
    start_on = live[index % len(live)]
    stub = cluster.stub(start_on)
    session_id = ""
    last_id = ""
    reason = ""
    call: object = stub.Run(pb.RunRequest(prompt=f"run {index}"), timeout=300)
    while time.monotonic() < deadline + 120:
        try:
            async for response in call:  # type: ignore[attr-defined]
                session_id = session_id or getattr(response, "session_id", "")
                idle, abort = _end_of(response)
                last_id = response.event_id or last_id
                if abort is not None:
                    reason = abort
                # An Attach replays what followed ``last_id`` before its own
                # task_state: the first idle either call sees is the run's end.
                if idle:
                    kind = classify(cluster, reason)
                    return Outcome(start_on.pid, kind, time.monotonic(), reason)
            # The stream ended without the run's end (a replica drained away).
            call = None
        except grpc.aio.AioRpcError as exc:
            if not session_id:
                if exc.code() in NOT_STARTED:
                    return None  # never started (Redis down, a replica draining)
                raise
        await asyncio.sleep(0.2)
        others = cluster.live()
        if others and session_id:
            target = others[(index + 1) % len(others)]
            call = cluster.stub(target).Attach(
                pb.AttachRequest(session_id=session_id, after_event_id=last_id), timeout=300
            )
        elif not session_id:
            return None
    return Outcome(start_on.pid, "unended", time.monotonic(), reason)


def classify(cluster: Cluster, reason: str) -> str:
    if not reason:
        return "completed"
    if match := LOST.search(reason):
        pid = int(match.group(1))
        if pid in cluster.killed:
            return "lost-dead"
        # A replica that drained and exited with a run still open (a drain
        # defect, not a lease one): it is not alive, but it is counted apart.
        return "lost-drained" if pid in cluster.stopped else "lost-live"
    if "session store" in reason:
        return "store"
    if "shutting down" in reason:
        return "shutdown"
    return f"other: {reason[:80]}"


@dataclass
class Fault:
    name: str
    at: float  # when the bound starts: the SIGKILL, or Redis answering again
    victim: int | None = None  # the killed replica's pid


async def workload(cluster: Cluster, workers: int, stop: asyncio.Event) -> list[Outcome]:
    outcomes: list[Outcome] = []
    counter = iter(range(10**9))

    async def worker() -> None:
        while not stop.is_set():
            try:
                out = await one_run(cluster, next(counter), time.monotonic())
            except grpc.aio.AioRpcError:
                await asyncio.sleep(0.2)
                continue
            if out is not None:
                outcomes.append(out)

    await asyncio.gather(*(worker() for _ in range(workers)))
    return outcomes


async def sample_memory(
    cluster: Cluster, samples: dict[int, list[float]], stop: asyncio.Event
) -> None:
    while not stop.is_set():
        for replica in cluster.live():
            mb = replica.rss_mb()
            if mb is not None:
                samples.setdefault(replica.pid, []).append(mb)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 1.0)


async def inject(cluster: Cluster, phases: list[str], args: argparse.Namespace) -> list[Fault]:
    faults: list[Fault] = []
    await asyncio.sleep(args.settle)
    for phase in phases:
        if phase == "redis":
            for _ in range(args.redis_restarts):
                cluster.redis.kill()
                await asyncio.sleep(1.0)
                await asyncio.to_thread(cluster.redis.start)
                faults.append(Fault("redis", time.monotonic()))
                await asyncio.sleep(args.settle)
        elif phase == "rolling":
            for old in list(cluster.live()):
                cluster.stopped.add(old.pid)
                old.process.terminate()
                await asyncio.to_thread(cluster.start_replica)
                try:
                    # --drain-timeout 30, and the drain's own bound on top.
                    await asyncio.to_thread(old.process.wait, 60)
                except subprocess.TimeoutExpired:
                    # A drain that never ends (#40 item 3): counted, then ended.
                    cluster.stuck_drains += 1
                    cluster.killed.add(old.pid)
                    old.process.kill()
                    await asyncio.to_thread(old.process.wait)
                await asyncio.sleep(2.0)
            faults.append(Fault("rolling", time.monotonic()))
            await asyncio.sleep(args.settle)
        elif phase == "sigkill":
            end = time.monotonic() + args.soak_minutes * 60
            while time.monotonic() < end:
                await asyncio.sleep(args.kill_every)
                victim = cluster.live()[0]
                cluster.killed.add(victim.pid)
                victim.process.kill()
                faults.append(Fault("sigkill", time.monotonic(), victim.pid))
                await asyncio.to_thread(victim.process.wait)
                await asyncio.to_thread(cluster.start_replica)
            await asyncio.sleep(args.settle)
    return faults


def close_times(faults: list[Fault], outcomes: list[Outcome]) -> dict[str, list[float]]:
    """Per fault kind, the seconds from each fault to the end of each run it
    cut: for a SIGKILL, the victim's runs ended by the take-over; for Redis,
    the runs it stopped (``store``), from Redis answering again (the close
    cannot be published before: it is the latest restart before the end)."""
    out: dict[str, list[float]] = {}
    for fault in faults:
        if fault.name == "sigkill":
            cut = [o for o in outcomes if o.replica == fault.victim and o.kind == "lost-dead"]
            out.setdefault(fault.name, []).extend(max(0.0, o.ended - fault.at) for o in cut)
    restarts = sorted(f.at for f in faults if f.name == "redis")
    for outcome in outcomes:
        if outcome.kind == "store" and restarts:
            before = [at for at in restarts if at <= outcome.ended]
            if before:
                out.setdefault("redis", []).append(outcome.ended - before[-1])
    return out


def hogs(root: Path, cpu: int, disk: int, seconds: float) -> list[subprocess.Popen[bytes]]:
    procs = [subprocess.Popen([sys.executable, "-c", CPU_HOG, str(seconds)]) for _ in range(cpu)]
    procs += [
        subprocess.Popen([sys.executable, "-c", DISK_HOG, str(seconds), str(root / f"fsync-{i}")])
        for i in range(disk)
    ]
    return procs


async def run(args: argparse.Namespace) -> int:
    phases = [p for p in args.phases.split(",") if p]
    with tempfile.TemporaryDirectory(prefix="lease-pressure-") as tmp:
        root = Path(tmp)
        cluster = Cluster(root, args.repeat, args.src, args.owner_loss)
        cluster.redis.start()
        for _ in range(3):
            cluster.start_replica()
        budget = args.settle * 6 + args.soak_minutes * 60 * ("sigkill" in phases) + 600
        pressure = hogs(root, args.cpu, args.disk, budget)
        stop = asyncio.Event()
        memory: dict[int, list[float]] = {}
        started = time.monotonic()
        try:
            load = asyncio.create_task(workload(cluster, args.workers, stop))
            sampler = asyncio.create_task(sample_memory(cluster, memory, stop))
            faults = await inject(cluster, phases, args)
            loadavg = os.getloadavg()
            stop.set()
            outcomes = await asyncio.wait_for(load, 300)
            await sampler
        finally:
            for proc in pressure:
                proc.kill()
                proc.wait()
            tracebacks = cluster.tracebacks()
            if args.keep_logs is not None:
                args.keep_logs.mkdir(parents=True, exist_ok=True)
                for log in cluster.logs:
                    (args.keep_logs / log.name).write_bytes(log.read_bytes())
            fenced_closes = cluster.log_count("closing the orphaned run of")
            held_back = cluster.log_count("this replica's own lease renewals are late")
            stuck = cluster.stuck_drains
            await cluster.close()
    elapsed = time.monotonic() - started
    kinds = Counter(o.kind for o in outcomes)
    print(f"phases {','.join(phases)}: {elapsed:.0f} s, {len(outcomes)} runs, "
          f"{args.cpu} CPU hogs + {args.disk} fsync writers, load average "
          f"{loadavg[0]:.1f}/{loadavg[1]:.1f}")  # fmt: skip
    for kind, n in sorted(kinds.items()):
        print(f"  {kind}: {n}")
    for outcome in [o for o in outcomes if o.kind == "lost-live"][:3]:
        print(f"    e.g. started on {outcome.replica}: {outcome.reason}")
    failed = False
    for name, times in close_times(faults, outcomes).items():
        bound = args.owner_loss  # every fault's documented bound (docs/deployment.md)
        if times:
            print(
                f"  close after {name}: n={len(times)} min {min(times):.1f} s, median "
                f"{statistics.median(times):.1f} s, max {max(times):.1f} s (bound {bound:g} s)"
            )
            failed |= max(times) > bound + args.slack
    for pid, mb in memory.items():
        if len(mb) >= 10:
            print(
                f"  replica {pid} RSS: first {mb[0]:.0f} MB, max {max(mb):.0f} MB, "
                f"last {mb[-1]:.0f} MB over {len(mb)} s"
            )
            failed |= max(mb) - mb[0] > args.memory_growth
    print(
        f"  failed orphan closes logged: {fenced_closes}; take-overs held back "
        f"(own renewals late): {held_back}; tracebacks: {tracebacks}; drains past 60 s "
        f"(SIGKILLed): {stuck}"
    )
    failed |= kinds["lost-live"] > 0 or kinds["unended"] > 0
    failed |= any(k.startswith("other") for k in kinds)
    return 1 if failed else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--phases", default="redis,rolling,sigkill")
    parser.add_argument("--owner-loss", type=float, default=OWNER_LOSS)
    parser.add_argument("--cpu", type=int, default=4)
    parser.add_argument("--disk", type=int, default=4)
    parser.add_argument("--workers", type=int, default=12)
    parser.add_argument("--repeat", type=int, default=3, help="demo engine: replies per run")
    parser.add_argument("--redis-restarts", type=int, default=3)
    parser.add_argument("--soak-minutes", type=float, default=10.0)
    parser.add_argument("--kill-every", type=float, default=60.0)
    parser.add_argument("--settle", type=float, default=8.0)
    parser.add_argument(
        "--src", type=Path, default=None, help="run the replicas from this src/ (a baseline)"
    )
    parser.add_argument("--keep-logs", type=Path, default=None, help="copy the replicas' logs here")
    parser.add_argument(
        "--memory-growth", type=float, default=100.0, help="MB a replica's RSS may grow"
    )
    parser.add_argument("--slack", type=float, default=5.0, help="scheduling on a loaded machine")
    args = parser.parse_args()
    return asyncio.run(run(args))


if __name__ == "__main__":
    sys.exit(main())
