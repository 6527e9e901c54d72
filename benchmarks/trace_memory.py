"""Peak memory and throughput of ``omni-grpc convert`` on a large JSONL trace.

Builds a JSONL trace of ``--size-mb`` (default 1024) by replicating the
conformance corpus, converts it to ``.binpb`` in a child process through the
CLI's own code path, and reports the child's peak RSS (``ru_maxrss`` of that
child, from ``wait4``) and throughput. A second child that only reads the file
line by line is the floor: the interpreter's own footprint and raw I/O speed.
``--verify`` converts back and checks the result is byte-identical.

    .venv/bin/python benchmarks/trace_memory.py [--size-mb 1024] [--verify]

The target is a peak RSS under 200 MB for a 1 GB input.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CORPUS = Path(__file__).resolve().parent.parent / "tests" / "conformance"

# The convert subcommand exactly as ``omni-grpc convert`` runs it.
CONVERT = """
import argparse, sys
from omni_grpc.cli import convert
parser = argparse.ArgumentParser(prog="omni-grpc")
convert.register(parser.add_subparsers())
args = parser.parse_args(["convert", "--progress", "never", *sys.argv[1:]])
sys.exit(args.handler(args))
"""

# The floor: read every line, do nothing with it.
READ_ONLY = """
import sys
n = 0
with open(sys.argv[1], "rb", buffering=1024 * 1024) as f:
    for line in f:
        n += 1
print(n)
"""


def corpus_chunk() -> tuple[bytes, int]:
    """Every parseable corpus line (torn and docs files left out), once."""
    lines = []
    for path in sorted(CORPUS.glob("*.jsonl")):
        if "torn" in path.name or path.name.startswith("docs_"):
            continue
        lines += [ln for ln in path.read_bytes().split(b"\n") if ln]
    return b"".join(ln + b"\n" for ln in lines), len(lines)


def build(path: Path, size_bytes: int) -> int:
    chunk, per_chunk = corpus_chunk()
    copies = max(1, size_bytes // len(chunk))
    with path.open("wb") as f:
        for _ in range(copies):
            f.write(chunk)
    return copies * per_chunk


def run_child(code: str, *args: str) -> tuple[float, int, int]:
    """(wall seconds, peak RSS in bytes, exit status) of one child process."""
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return time.perf_counter() - start, usage.ru_maxrss * 1024, proc.returncode


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=1024, help="input size (default 1024)")
    parser.add_argument("--verify", action="store_true", help="convert back and compare bytes")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="omni-trace-bench-") as tmp:
        src, out = Path(tmp) / "big.jsonl", Path(tmp) / "big.binpb"
        records = build(src, args.size_mb * 1024 * 1024)
        size_mb = src.stat().st_size / 1e6
        print(f"input: {size_mb:,.0f} MB JSONL, {records:,} records (corpus replicated)")

        floor_s, floor_rss, code = run_child(READ_ONLY, str(src))
        assert code == 0
        conv_s, conv_rss, code = run_child(CONVERT, str(src), str(out))
        if code != 0:
            print(f"conversion failed with exit status {code}", file=sys.stderr)
            return 1
        out_mb = out.stat().st_size / 1e6

        print(f"{'':24}{'seconds':>9}{'MB/s':>9}{'records/s':>12}{'peak RSS MB':>13}")
        for name, secs, rss in (
            ("read lines (floor)", floor_s, floor_rss),
            ("convert jsonl->binpb", conv_s, conv_rss),
        ):
            print(
                f"{name:24}{secs:9.1f}{size_mb / secs:9.1f}{records / secs:12,.0f}{rss / 1e6:13.1f}"
            )
        print(f"output: {out_mb:,.0f} MB .binpb ({out_mb / size_mb:.0%} of the input)")
        verdict = "PASS" if conv_rss < 200e6 else "FAIL"
        print(f"peak RSS target < 200 MB: {verdict} ({conv_rss / 1e6:.1f} MB)")

        if args.verify:
            back = Path(tmp) / "back.jsonl"
            back_s, back_rss, code = run_child(CONVERT, str(out), str(back))
            same = code == 0 and sha256(back) == sha256(src)
            print(
                f"binpb->jsonl: {back_s:.1f} s, peak RSS {back_rss / 1e6:.1f} MB, "
                f"byte-identical: {same}"
            )
            if not same:
                return 1
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
