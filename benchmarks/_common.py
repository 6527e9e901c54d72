"""What the benchmark scripts share: the corpus, best-of timing, process CPU.

The scripts run as ``python benchmarks/<name>.py``, so this directory is on
``sys.path`` and they import it as ``_common``.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "conformance"
_TICK = os.sysconf("SC_CLK_TCK")


def corpus_lines() -> list[bytes]:
    """Every conformance line the codec accepts (torn and broken ones left out)."""
    from omni_grpc.convert import parse_message  # imported late: CLI timings import nothing

    lines = []
    for path in sorted(CORPUS.glob("*.jsonl")):
        for line in path.read_bytes().split(b"\n"):
            try:
                parse_message(line)
            except ValueError:
                continue
            lines.append(line)
    return lines


def best_seconds(work: Callable[[], object], repeat: int) -> float:
    """The shortest wall time of ``repeat`` calls: the run least disturbed by load."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return min(times)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def threads_cpu_seconds(pid: int) -> float:
    """Time the process's live threads have spent on a CPU, in nanoseconds'
    resolution (/proc schedstat), where /proc stat counts clock ticks (10 ms).
    A thread that exited takes its share with it, so read it around work done
    by long-lived threads (an event loop, gRPC's pollers)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            continue  # the thread ended meanwhile
    return total / 1e9


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def interleaved_rates(works: dict[str, Callable[[], int]], repeat: int) -> dict[str, float]:
    """The best items/s of each ``work`` over ``repeat`` rounds, each round
    running every work once in turn, timed on this thread's CPU clock: load
    from other processes then hits all of them alike and is not counted."""
    best = dict.fromkeys(works, 0.0)
    for _ in range(repeat):
        for name, work in works.items():
            start = time.thread_time()
            count = work()
            best[name] = max(best[name], count / max(time.thread_time() - start, 1e-9))
    return best
