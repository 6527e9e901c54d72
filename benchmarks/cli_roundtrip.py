"""CLI round trip: ``omni-grpc convert`` JSONL -> ``.binpb`` -> JSONL on the
conformance corpus replicated to N lines, against a floor measured in the
same run: a process that reads the JSONL, runs orjson loads+dumps on each
line and writes it back (so both sides pay interpreter start-up and I/O).

Costs are CPU seconds of the child processes (user + system), best of
``--repeat`` rounds, the two sides interleaved within each round so machine
load hits both alike. ``OMNI_GRPC_NATIVE=0`` in the environment measures the
pure-Python codec.

Usage: python benchmarks/cli_roundtrip.py [--lines 200000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import corpus_lines  # benchmarks/_common.py, beside this file

FLOOR = (
    "import sys, orjson\n"
    "loads, dumps = orjson.loads, orjson.dumps\n"
    "with open(sys.argv[1], 'rb') as src, open(sys.argv[2], 'wb') as out:\n"
    "    out.writelines(dumps(loads(line)) + b'\\n' for line in src)\n"
)


def child_cpu(argv: list[str]) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(argv, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    base = corpus_lines()
    lines = (base * (args.lines // len(base) + 1))[: args.lines]
    cli = [sys.executable, "-c", "import sys; from omni_grpc.cli import main; sys.exit(main())"]
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp, "in.jsonl")
        source.write_bytes(b"\n".join(lines) + b"\n")
        binpb, back, floor_out = Path(tmp, "t.binpb"), Path(tmp, "back.jsonl"), Path(tmp, "f.jsonl")
        floors, ours = [], []
        for _ in range(args.repeat):
            floors.append(child_cpu([sys.executable, "-c", FLOOR, str(source), str(floor_out)]))
            ours.append(
                child_cpu([*cli, "convert", str(source), str(binpb)])
                + child_cpu([*cli, "convert", str(binpb), str(back)])
            )
            if back.read_bytes() != source.read_bytes():
                raise SystemExit("round trip changed the bytes")
        floor, cost = min(floors), min(ours)
    native = os.environ.get("OMNI_GRPC_NATIVE", "auto")
    print(f"{len(lines)} lines, best of {args.repeat} (OMNI_GRPC_NATIVE={native})")
    print(f"floor (orjson loads+dumps process)  {floor:7.2f} s CPU")
    print(f"omni-grpc convert, both directions   {cost:7.2f} s CPU  {cost / floor:5.2f}x floor")


if __name__ == "__main__":
    main()
