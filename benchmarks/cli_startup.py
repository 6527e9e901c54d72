"""How long the client verbs take to start, as a ratio to
``python -c "import grpc"`` measured in the same run.

Each verb runs as its own process against a real ``omni-grpc serve`` started
here (demo engine, gRPC only, a temp data dir). The verbs that do one call
are timed to their exit: ``abort`` of an idle session (exit 1), ``approve``
of a call that is not pending (exit 3), ``sessions``, ``history --json``,
``run --detach``. The ones that render a stream are timed to their first
byte of output, the start a person sees: ``run`` and ``chat`` (a demo turn,
so the server's first event is in it), ``attach`` (replaying a finished
task), ``history`` (the rendered record). Wall time, best of ``--repeat``
rounds, the verbs and the baseline interleaved in each round so machine load
hits them alike.

``--before SRC`` also times each verb with ``PYTHONPATH=SRC``, the package as
it was (``git archive 3cdb401 src | tar -x -C /tmp/before``, then
``--before /tmp/before/src``), in the same rounds, against the same server.

Usage: python benchmarks/cli_startup.py [--repeat 15] [--before SRC]
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BASELINE = [sys.executable, "-c", "import grpc"]
OMNI = [sys.executable, "-m", "omni_grpc"]


def wall(argv: list[str], env: dict[str, str] | None = None) -> float:
    """Seconds from starting ``argv`` to its exit."""
    start = time.perf_counter()
    subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=False, env=env)  # fmt: skip
    return time.perf_counter() - start


def first_output(
    argv: list[str], stdin: str = "", *, follows: bool = False, env: dict[str, str] | None = None
) -> float:
    """Seconds from starting ``argv`` to its first byte on stdout; it is then
    let run to its end, or (``follows``: it would not end) stopped as Ctrl-C
    stops it."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, env=env)  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(stdin.encode())
    proc.stdin.close()
    got = proc.stdout.read(1)
    took = time.perf_counter() - start
    if not got:
        raise SystemExit(f"{argv[3:]} printed nothing (exit {proc.wait()})")
    if follows:
        proc.send_signal(signal.SIGINT)
    proc.stdout.read()
    proc.wait(timeout=60)
    proc.stdout.close()
    return took


def serve(data: Path) -> tuple[subprocess.Popen[str], str]:
    """A real server; its gRPC address, read from the banner it prints."""
    proc = subprocess.Popen(
        [*OMNI, "serve", "--grpc-port", "0", "--no-http", "--data-dir", str(data)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    for line in proc.stdout:
        if (found := re.search(r"grpc://(\S+)", line)) is not None:
            return proc, found.group(1)
        if time.monotonic() > deadline:
            break
    proc.kill()
    raise SystemExit("the server did not print its gRPC address")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--before", metavar="SRC", help="also time the package found in SRC")
    args = parser.parse_args()
    # Each variant's environment: this checkout's package, and the one before.
    variants: dict[str, dict[str, str] | None] = {"now": None}
    if args.before:
        variants["before"] = {**os.environ, "PYTHONPATH": args.before}
    with tempfile.TemporaryDirectory() as tmp:
        proc, address = serve(Path(tmp, "data"))
        try:
            target = ["--target", address]
            first = subprocess.run(
                [*OMNI, "run", "hi", "--approve", "allow", "--detach", *target],
                capture_output=True, text=True, check=True,
            )  # fmt: skip
            sid = first.stdout.strip()
            listed = subprocess.run([*OMNI, "sessions", "--json", *target], capture_output=True,
                                    text=True, check=True).stdout  # fmt: skip
            newest = re.search(r'"last_event_id": "(.*)-\d+"', listed)
            assert newest is not None, listed
            replay = f"{newest.group(1)}-0"
            to_exit: dict[str, list[str]] = {
                "--version": [*OMNI, "--version"],
                "abort SID": [*OMNI, "abort", sid, *target],
                "approve SID CALL allow": [*OMNI, "approve", sid, "call_x", "allow", *target],
                "sessions": [*OMNI, "sessions", *target],
                "history SID --json": [*OMNI, "history", sid, "--json", *target],
                "run --detach": [*OMNI, "run", "hi", "--approve", "allow", "--detach", *target],
            }
            to_output: dict[str, tuple[list[str], str, bool]] = {
                "run (first output)": (
                    [*OMNI, "run", "hi", "--approve", "allow", *target],
                    "",
                    False,
                ),
                "chat (first output)": (
                    [*OMNI, "chat", "--approve", "allow", *target],
                    "hi\n",
                    False,
                ),
                # A finished task replayed; attach would then wait for the next.
                "attach (first output)": (
                    [*OMNI, "attach", sid, "--after", replay, *target],
                    "",
                    True,
                ),
                "history (first output)": ([*OMNI, "history", sid, *target], "", False),
            }
            verbs = [*to_exit, *to_output]
            best = {(name, v): float("inf") for name in verbs for v in variants}
            base = float("inf")
            for _ in range(args.repeat):
                base = min(base, wall(BASELINE))
                for variant, env in variants.items():
                    for name, argv in to_exit.items():
                        best[name, variant] = min(best[name, variant], wall(argv, env))
                    for name, (argv, stdin, follows) in to_output.items():
                        took = first_output(argv, stdin, follows=follows, env=env)
                        best[name, variant] = min(best[name, variant], took)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    print(f"best of {args.repeat}, wall seconds per process (cpus: {os.cpu_count()})")
    floor = 'python -c "import grpc"'
    print(f"  {floor:<34}{base:8.3f} s   1.00x (baseline)")
    for name in verbs:
        row = f"  {'omni-grpc ' + name:<34}"
        row += f"{best[name, 'now']:8.3f} s {best[name, 'now'] / base:6.2f}x"
        if "before" in variants:
            row += f"   before: {best[name, 'before']:6.3f} s {best[name, 'before'] / base:6.2f}x"
        print(row)


if __name__ == "__main__":
    main()
