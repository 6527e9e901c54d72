"""CLI round trip: ``omni-grpc convert`` JSONL -> ``.binpb`` -> JSONL on the
conformance corpus replicated to N lines, against a floor measured in the
same run: a process that reads the JSONL, runs orjson loads+dumps on each
line and writes it back (so both sides pay interpreter start-up and I/O).

Costs are CPU seconds of the child processes (user + system), best of
``--repeat`` rounds, the two sides interleaved within each round so machine
load hits both alike. ``OMNI_GRPC_NATIVE=0`` in the environment measures the
pure-Python codec.

With ``--before DIR`` (a checkout of another revision, e.g. made with
``git archive main src generated/python | tar -x -C DIR`` plus a built
``_codec`` extension), that revision's CLI is measured in the same rounds,
``PYTHONPATH=DIR/src:DIR/generated/python``; ``--plain`` is measured beside
the default form.

The children run without ``PYTHONDONTWRITEBYTECODE`` (a warm-up run of each
side writes the bytecode caches first): an installed package has its
``.pyc`` files, and a sandbox that sets the variable would otherwise make
every ``omni-grpc`` process compile its modules from source, about 0.15 s
of CPU per process that no user pays (the floor imports only orjson).

Usage: python benchmarks/cli_roundtrip.py [--lines 200000] [--repeat 3] [--before DIR]
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


def child_cpu(argv: list[str], env: dict[str, str] | None = None) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(argv, check=True, env=env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--before", help="another revision's tree, measured alike")
    args = parser.parse_args()
    base = corpus_lines()
    lines = (base * (args.lines // len(base) + 1))[: args.lines]
    cli = [sys.executable, "-c", "import sys; from omni_grpc.cli import main; sys.exit(main())"]
    plain_env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    envs: dict[str, dict[str, str]] = {"this revision": plain_env}
    if args.before:
        tree = Path(args.before).resolve()
        path = f"{tree / 'src'}:{tree / 'generated' / 'python'}"
        envs["before (--before)"] = {**plain_env, "PYTHONPATH": path}
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp, "in.jsonl")
        source.write_bytes(b"\n".join(lines) + b"\n")
        binpb, back, floor_out = Path(tmp, "t.binpb"), Path(tmp, "back.jsonl"), Path(tmp, "f.jsonl")
        costs: dict[str, list[tuple[float, float]]] = {}
        floors = []
        warm, warm_binpb = Path(tmp, "warm.jsonl"), Path(tmp, "warm.binpb")
        warm.write_bytes(b"\n".join(base) + b"\n")
        for env in envs.values():  # warm-up: each side writes its bytecode caches
            subprocess.run([*cli, "convert", str(warm), str(warm_binpb)], check=True, env=env)
            subprocess.run([*cli, "convert", str(warm_binpb), str(back)], check=True, env=env)
        for _ in range(args.repeat):
            floors.append(
                child_cpu([sys.executable, "-c", FLOOR, str(source), str(floor_out)], plain_env)
            )
            for name, env in envs.items():
                for flags in ([], ["--plain"]):
                    there = child_cpu([*cli, "convert", *flags, str(source), str(binpb)], env)
                    again = child_cpu([*cli, "convert", str(binpb), str(back)], env)
                    costs.setdefault(f"{name}{' --plain' if flags else ''}", []).append(
                        (there, again)
                    )
                    if back.read_bytes() != source.read_bytes():
                        raise SystemExit("round trip changed the bytes")
        floor = min(floors)
    native = os.environ.get("OMNI_GRPC_NATIVE", "auto")
    print(f"{len(lines)} lines, best of {args.repeat} (OMNI_GRPC_NATIVE={native})")
    print(f"floor (orjson loads+dumps process)     {floor:7.2f} s CPU")
    for name, runs in costs.items():
        there, again = min(runs, key=sum)
        cost = there + again
        print(
            f"{name:38} {cost:7.2f} s CPU  {cost / floor:5.2f}x floor"
            f"  (to .binpb {there:.2f}, back {again:.2f})"
        )


if __name__ == "__main__":
    main()
