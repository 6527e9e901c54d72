"""The Run stream with Prometheus metrics on against off, in one run.

Two ``omni-grpc serve`` processes (demo engine, zero pacing, a long answer):
one as shipped (metrics on, a scrape between rounds, as Prometheus would),
one with ``--no-metrics``. Rounds alternate on/off; the report gives the
medians and the on/off ratio of events/s (the aim is >= 0.95) and of server
CPU per event. ``--control`` turns metrics on in both, so the "ratio" shows
how far two identical servers drift apart on this machine.

    .venv/bin/python benchmarks/metrics_overhead.py [--repeat 300] [--rounds 12] [--control]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import urllib.request

from grpc_stream import Sample, measured, omni_run, start


def scrape(url: str) -> int:
    with urllib.request.urlopen(url) as response:
        return len(response.read())


async def bench(repeat: int, rounds: int, control: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        common = ["--grpc-port", "0", "--no-http", "--engine-opt", f"repeat={repeat}"]
        on_proc, on_target = start(
            [sys.executable, "-m", "omni_grpc", "serve", *common, "--data-dir", f"{tmp}/on",
             "--metrics-port", "0"],
            "gRPC on",
        )  # fmt: skip
        assert on_proc.stdout is not None
        metrics_url = next(
            line.strip().rsplit(" ", 1)[-1] for line in on_proc.stdout if "metrics on" in line
        )
        off_proc, off_target = start(
            [sys.executable, "-m", "omni_grpc", "serve", *common, "--data-dir", f"{tmp}/off",
             *(["--metrics-port", "0"] if control else ["--no-metrics"])],
            "gRPC on",
        )  # fmt: skip
        try:
            await omni_run(on_target, "warm up")
            await omni_run(off_target, "warm up")
            on: list[Sample] = []
            off: list[Sample] = []
            size = 0
            for i in range(rounds):
                # Alternate which goes first, so neither always runs on a warmer machine.
                order = [(on, on_proc, on_target), (off, off_proc, off_target)]
                for samples, proc, target in order if i % 2 == 0 else order[::-1]:
                    samples.append(await measured(proc.pid, omni_run(target, "go")))
                size = scrape(metrics_url)
        finally:
            for proc in (on_proc, off_proc):
                proc.terminate()
                proc.wait()
    report(on, off, repeat, size)


def report(on: list[Sample], off: list[Sample], repeat: int, scrape_bytes: int) -> None:
    def rate(samples: list[Sample]) -> float:
        return statistics.median(n / t for n, _, _, t, _ in samples)

    def cpu(samples: list[Sample]) -> float:
        return sum(c for *_, c in samples) / sum(n for n, *_ in samples) * 1e6

    ratios = [(a[0] / a[3]) / (b[0] / b[3]) for a, b in zip(on, off, strict=True)]
    print(f"demo engine, repeat={repeat}: {on[0][0]} events per stream, {len(on)} rounds each")
    print(f"a scrape of the metrics-on server after each round: {scrape_bytes} bytes")
    print(f"{'':12} {'events/s':>9} {'server CPU/event':>17}")
    print(f"{'metrics on':12} {rate(on):>9.0f} {cpu(on):>15.1f}us")
    print(f"{'metrics off':12} {rate(off):>9.0f} {cpu(off):>15.1f}us")
    print(
        f"on/off events/s: ratio of medians {rate(on) / rate(off):.3f}, median per-round "
        f"ratio {statistics.median(ratios):.3f}; off/on CPU per event {cpu(off) / cpu(on):.3f} "
        "(the aim is >= 0.95)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--repeat", type=int, default=300, help="demo answer repetitions")
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument(
        "--control",
        action="store_true",
        help="metrics on in both servers: the ratio then shows the machine's noise",
    )
    args = parser.parse_args()
    asyncio.run(bench(args.repeat, args.rounds, args.control))


if __name__ == "__main__":
    main()
