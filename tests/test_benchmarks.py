"""The benchmark scripts run at tiny sizes and report their figures.

No timing is asserted (speed is measured in benchmarks/, figures in
BENCHMARKS.md): this only keeps the scripts working as the code under them
moves, and checks each prints the rows BENCHMARKS.md quotes, with numbers.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).parents[1] / "benchmarks"
NUMBER = r"[0-9][0-9,]*(?:\.[0-9]+)?"

# script, tiny arguments, rows its output must contain (regexes)
CASES = [
    (
        "convert.py",
        ["--messages", "600", "--repeat", "1"],
        [
            rf"floor \(orjson loads\+dumps\)\s+{NUMBER}\s+{NUMBER}",
            rf"omni-grpc JSON->proto->JSON\s+{NUMBER}\s+{NUMBER}",
            rf"tool_list_ready alone, round trip\s+{NUMBER}\s+{NUMBER}",
        ],
    ),
    (
        "cli_roundtrip.py",
        ["--lines", "300", "--repeat", "1"],
        [rf"omni-grpc convert, both directions\s+{NUMBER} s CPU\s+{NUMBER}x floor"],
    ),
    (
        "sizes.py",
        ["--schema-lines", "1", "--tools", "5"],
        [
            rf"conformance corpus: 272 lines\n  JSONL {NUMBER} bytes, \.binpb {NUMBER} bytes",
            rf"JSON -> proto {NUMBER}x the floor, proto -> JSON {NUMBER}x",
        ],
    ),
    (
        "streaming.py",
        ["--segments", "2", "--repeat", "1"],
        [rf"RunGuard\.observe \(JSON\)\s+{NUMBER}\s+{NUMBER}\s+{NUMBER}x"],
    ),
]


@pytest.mark.parametrize(("script", "args", "rows"), CASES, ids=[c[0] for c in CASES])
def test_benchmark_runs_and_reports(script: str, args: list[str], rows: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *args],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    for row in rows:
        assert re.search(row, done.stdout), f"{script}: no {row!r} in\n{done.stdout}"
