"""Trace appends on the event loop against on the recorder's threads (#40).

Runs append records to their traces side by side (each its own session, one
record at a time, in order) while a probe on the same event loop sleeps 10 ms
at a time and records how late it wakes: the loop's longest stall is what
every other client, health check and (before #40) lease renewal of the
replica waited. Beside fsync-heavy writers on the same disk (``--disk``), an
append's ``open``/``flock``/``write`` can wait on the file system's journal.

* ``on the loop``: ``TraceStore.append`` called on the loop, as every append
  was before (``Recorder.append`` was synchronous);
* ``threads``: ``await Recorder.append``, which writes on the recorder's
  threads.

Printed per way: records per second, and the probe's longest and 99th
percentile lateness.

    .venv/bin/python benchmarks/trace_appends.py [--runs 8] [--records 400] [--disk 2]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from omni_grpc import protocol
from omni_grpc.convert import message_from_dict
from omni_grpc.engines.base import AbortSignal
from omni_grpc.engines.demo import DemoEngine
from omni_grpc.runtime import bodies
from omni_grpc.runtime.approvals import ApprovalBroker
from omni_grpc.runtime.backend import memory_backend
from omni_grpc.runtime.health import HealthState
from omni_grpc.runtime.recorder import Recorder
from omni_grpc.runtime.run import Run
from omni_grpc.runtime.run_lease import Lease
from omni_grpc.runtime.session_index import SessionRecord
from omni_grpc.runtime.trace_store import TraceStore

DISK_HOG = """import os,sys,time
end=time.time()+float(sys.argv[1]); path=sys.argv[2]; block=os.urandom(1<<16)
fd=os.open(path, os.O_WRONLY|os.O_CREAT|os.O_TRUNC, 0o600)
n=0
while time.time()<end:
    os.write(fd, block); os.fsync(fd); n+=1
    if n % 256 == 0: os.ftruncate(fd, 0); os.lseek(fd, 0, 0)
os.close(fd); os.unlink(path)
"""


async def probe(lateness: list[float], stop: asyncio.Event) -> None:
    while not stop.is_set():
        before = time.monotonic()
        await asyncio.sleep(0.01)
        lateness.append(time.monotonic() - before - 0.01)


async def one_way(root: Path, way: str, runs: int, records: int) -> tuple[float, list[float]]:
    backend = dataclasses.replace(memory_backend(), shared=True)
    store = TraceStore(root / way)
    recorder = Recorder(DemoEngine(), store, backend, HealthState())
    text = "x" * 1000
    msg = message_from_dict(protocol.assistant_text(text))
    data = bodies.message_body(msg).data

    async def run(i: int) -> None:
        session_id = f"session-2026-12-07-00-00-00-{i:08x}"
        record = SessionRecord(session_id, "t", "t", 0, (store.new_shard(session_id),))
        lease = Lease(session_id, "bench", 1, math.inf)
        the_run = Run(
            record, lease, backend.logs.get(session_id), AbortSignal(), ApprovalBroker(session_id)
        )
        for k in range(records):
            if way == "on the loop":
                store.append(the_run.record, msg, data, number=k + 1)
                await asyncio.sleep(0)  # the run yields between records, as an engine does
            else:
                await recorder.append(the_run, msg, data)

    lateness: list[float] = []
    stop = asyncio.Event()
    prober = asyncio.create_task(probe(lateness, stop))
    started = time.monotonic()
    await asyncio.gather(*(run(i) for i in range(runs)))
    elapsed = time.monotonic() - started
    stop.set()
    await prober
    recorder.close()
    return runs * records / elapsed, lateness


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--records", type=int, default=400)
    parser.add_argument("--disk", type=int, default=2, help="fsync-heavy writers beside")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="trace-appends-") as tmp:
        root = Path(tmp)
        hogs = [
            subprocess.Popen([sys.executable, "-c", DISK_HOG, "600", str(root / f"fsync-{i}")])
            for i in range(args.disk)
        ]
        try:
            await asyncio.sleep(1.0)  # the writers get going
            for way in ("on the loop", "threads"):
                rate, lateness = await one_way(root, way, args.runs, args.records)
                lateness.sort()
                p99 = lateness[int(len(lateness) * 0.99)] if lateness else 0.0
                print(
                    f"{way:12s}: {rate:8.0f} records/s, loop late by max "
                    f"{max(lateness) * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms "
                    f"({len(lateness)} probes)"
                )
        finally:
            for hog in hogs:
                hog.kill()
                hog.wait()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
