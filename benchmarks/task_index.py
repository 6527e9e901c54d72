"""ListTasks' cost against the number of tasks kept: a page of the task index
at 1,000, 10,000 and 100,000 tasks, side by side in one run.

Fills a task index (memory, and Redis when ``--redis-url`` names one: a
scratch database, its keys under a prefix of this run's, deleted after) with
that many runs spread over 100 sessions, a third of them canceled, and times
a page of 50: of every task, of one session's, and of one state's (the three
ListTasks filters), best of ``--repeat``. Ratios are to the 1,000-task index
of the same run: a page that costs the tasks it returns stays near 1x.

    .venv/bin/python benchmarks/task_index.py --repeat 200 [--redis-url redis://127.0.0.1:6379/0]
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import time
from collections.abc import Callable

from omni_grpc.runtime.task_index import MemoryTaskIndex, TaskIndex, TaskRecord
from omni_grpc.vocabulary import TaskStatus

SIZES = (1_000, 10_000, 100_000)
SESSIONS = 100


def record(n: int) -> TaskRecord:
    stamp = f"2026-12-07T{n // 3600 % 24:02d}:{n // 60 % 60:02d}:{n % 60:02d}.{n % 1000:03d}Z"
    state = TaskStatus.CANCELED if n % 3 == 0 else TaskStatus.COMPLETED
    return TaskRecord(
        f"s{n % SESSIONS}", f"ep-{n}", state, stamp, stamp, f"ep-{n + 40}", n, n + 12, f"m{n}"
    )


async def best(index: TaskIndex, repeat: int, **where: str) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        await index.page(limit=50, **where)  # type: ignore[arg-type]
        times.append(time.perf_counter() - start)
    return min(times)


async def measure(make: Callable[[], TaskIndex], repeat: int) -> dict[int, list[float]]:
    out: dict[int, list[float]] = {}
    for size in SIZES:
        index = make()
        for n in range(size):
            await index.put(record(n))
        out[size] = [
            await best(index, repeat),
            await best(index, repeat, session_id="s7"),
            await best(index, repeat, state=TaskStatus.CANCELED),
        ]
        for s in range(SESSIONS):
            await index.remove_session(f"s{s}")
    return out


def report(name: str, out: dict[int, list[float]]) -> None:
    base = out[SIZES[0]]
    print(f"\n{name}: a page of 50, best time (ratio to {SIZES[0]:,} tasks)")
    print("| tasks kept | every task | one session's | one state's |")
    print("| ---: | ---: | ---: | ---: |")
    for size, row in out.items():
        cells = [f"{t * 1e6:,.0f} us ({t / b:.2f}x)" for t, b in zip(row, base, strict=True)]
        print(f"| {size:,} | " + " | ".join(cells) + " |")


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--redis-url")
    args = parser.parse_args()
    report("memory", await measure(MemoryTaskIndex, args.repeat))
    if args.redis_url:
        from omni_grpc.runtime.redis.connection import RedisConnection
        from omni_grpc.runtime.redis.task_index import RedisTaskIndex

        conn = RedisConnection(args.redis_url, prefix=f"bench-{secrets.token_hex(4)}:")
        try:
            report("redis", await measure(lambda: RedisTaskIndex(conn), args.repeat // 4 or 1))
        finally:
            await conn.aclose()


if __name__ == "__main__":
    asyncio.run(main())
