"""Which copies of one large message a server holds at its peak (#27).

``large_messages.py`` says how high the server's RSS goes; this says what is
in it. ``omni-grpc serve`` runs under memray (``--native``, so allocations
made by grpc, upb and the native codec are seen with the Python frames that
caused them); one small turn, then one Run of a large prompt the demo engine
echoes. memray records the process's RSS every 10 ms; for the moments of
highest RSS this prints every allocation of half the prompt or more that was
alive then, named by the innermost frame in omni_grpc (or, where none is on
the stack, the native function that made it: grpc's own buffers).

    .venv/bin/python benchmarks/large_message_copies.py [--mib 16] [--top 3]
        [--redis-url URL]

With ``PYTHONPATH=OTHER_TREE/src`` the server (and the frame names) are
another tree's: before and after a change, with the same tool.

A size is what was allocated, not what is resident: a buffer grown by
doubling shows its capacity, and memray's own tables add to the RSS column.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from memray import FileReader

sys.path.insert(0, str(Path(__file__).parent))
from scale_out import Proc, start_serve  # benchmarks/scale_out.py

import omni_grpc
from omni_grpc.client import AgentClient

MiB = 1 << 20
# The server runs the omni_grpc this script imports (PYTHONPATH=OTHER/src for another tree).
_SRC = str(Path(omni_grpc.__file__).resolve().parent) + "/"


def serve_under_memray(capture: Path, data_dir: Path, extra: list[str]) -> Proc:
    memray = [sys.executable, "-m", "memray", "run", "--native", "--force", "--quiet",
              "--output", str(capture)]  # fmt: skip
    return start_serve(data_dir, *extra, launcher=memray)


async def one_run(address: str, mib: float) -> None:
    async with AgentClient(address) as client:
        small = client.run("hi")
        session_id = await small.session()
        _ = [event async for event in small]
        events = [e async for e in client.run("p" * int(mib * MiB), session_id=session_id)]
    if not events or not events[-1].is_task_end:
        raise RuntimeError("the large run did not end")


# The process's entry frames: below every allocation, so they name none.
_ENTRY = ("cli/serve.py", "cli/__init__.py", "__main__.py")


def where(stack: list[tuple[str, str, int]]) -> str:
    """The innermost omni_grpc frame (and, inside the codec, the caller that
    asked for it); for an allocation no omni_grpc code made (grpc's own
    buffers), the native function that did."""
    ours = [
        f"{file[len(_SRC) :]}:{line} {fn}"
        for fn, file, line in stack
        if file.startswith(_SRC) and not file[len(_SRC) :].startswith(_ENTRY)
    ]
    if not ours:
        named = [fn for fn, file, _ in stack if fn != "<unknown>" and not fn.startswith("_Py")]
        return f"native: {named[0] if named else stack[0][0]}"
    caller = next((f for f in ours if not f.startswith("convert/")), None)
    if ours[0].startswith("convert/") and caller is not None:
        return f"{ours[0]} < {caller}"
    return ours[0]


def peaks(capture: Path, top: int, least: int) -> Iterator[tuple[float, list[tuple[float, str]]]]:
    """(RSS MiB, [(MiB, where)]) at the ``top`` snapshots of highest RSS."""
    reader = FileReader(capture)
    snapshots = list(reader.get_memory_snapshots())
    records = list(reader.get_temporal_allocation_records(merge_threads=True))
    highest = sorted(range(len(snapshots)), key=lambda i: -snapshots[i].rss)[:top]
    for i in highest:
        live = []
        for record in records:
            size = sum(
                iv.n_bytes
                for iv in record.intervals
                if iv.allocated_before_snapshot <= i
                and (iv.deallocated_before_snapshot is None or iv.deallocated_before_snapshot > i)
            )
            if size >= least:
                live.append((size / MiB, where(record.hybrid_stack_trace(max_stacks=60))))
        yield snapshots[i].rss / MiB, sorted(live, reverse=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=float, default=16.0)
    parser.add_argument("--top", type=int, default=3, help="moments of highest RSS shown")
    parser.add_argument("--redis-url", help="the Redis backend (default: memory)")
    args = parser.parse_args()
    extra = ["--redis-url", args.redis_url] if args.redis_url else []
    with tempfile.TemporaryDirectory() as tmp:
        capture = Path(tmp) / "serve.bin"
        server = serve_under_memray(capture, Path(tmp) / "data", extra)
        try:
            asyncio.run(one_run(server.address, args.mib))
        finally:
            server.process.send_signal(signal.SIGINT)  # memray writes its capture on the way out
            server.process.wait(120)
        least = int(args.mib * MiB) // 2
        for n, (rss, live) in enumerate(peaks(capture, args.top, least), 1):
            held = sum(size for size, _ in live)
            print(
                f"\n#{n}: RSS {rss:.0f} MiB; {len(live)} allocations of {args.mib / 2:g} MiB "
                f"or more alive, {held:.0f} MiB ({held / args.mib:.1f}x)\n"
            )
            print("| MiB | x message | made at |")
            print("|---:|---:|---|")
            for size, place in live:
                print(f"| {size:.1f} | {size / args.mib:.1f} | `{place}` |")


if __name__ == "__main__":
    main()
