"""What the record number's check costs a trace append (#41).

One process appends ``--records`` records of 1 KB to a fresh shard through
``TraceWriter``, three ways, in the same run: unnumbered (the memory
backend), numbered by one writer (the count is the writer's own, checked
against the shard's size), and numbered by two writers taking turns (each
append finds the shard grown by the other, so it counts the shard through
its index, as a take-over's first append does). The ways take turns over
``--rounds`` rounds (a loaded machine's noise falls on all of them alike);
prints each way's median records/s and its ratio to the unnumbered one.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from omni_grpc import protocol
from omni_grpc.convert import message_from_dict, serialize_message
from omni_grpc.trace import TraceWriter


def one_way(root: Path, way: str, records: int, round_: int) -> float:
    shard = root / f"{round_}-{way.replace(' ', '-')}" / "session-x_001.jsonl"
    writers = [TraceWriter(shard), TraceWriter(shard)]
    msg = message_from_dict(protocol.assistant_text("x" * 1000))
    line = serialize_message(msg)
    started = time.perf_counter()
    for k in range(records):
        if way == "unnumbered":
            writers[0].write(msg, line)
        elif way == "numbered, one writer":
            writers[0].write(msg, line, number=k + 1)
        else:
            writers[k % 2].write(msg, line, number=k + 1)
    return records / (time.perf_counter() - started)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    ways = ["unnumbered", "numbered, one writer", "numbered, two writers in turn"]
    seen: dict[str, list[float]] = {way: [] for way in ways}
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.rounds):
            turn = ways[round_ % 3 :] + ways[: round_ % 3]
            for way in turn:
                seen[way].append(one_way(Path(tmp), way, args.records, round_))
    rates = {way: statistics.median(r) for way, r in seen.items()}
    base = rates["unnumbered"]
    print("| way | records/s | ratio |")
    print("| --- | --- | --- |")
    for way, rate in rates.items():
        print(f"| {way} | {rate:,.0f} | {rate / base:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
