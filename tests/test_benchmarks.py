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

from omni_grpc.convert import _message

BENCHMARKS = Path(__file__).parents[1] / "benchmarks"
NUMBER = r"[0-9][0-9,]*(?:\.[0-9]+)?"
# grpc_stream.py measures the native codec only where it is built.
CODECS = ["pure", "native"] if _message.NATIVE is not None else ["pure"]

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
        [
            rf"floor \(orjson loads\+dumps process\)\s+{NUMBER} s CPU",
            rf"this revision\s+{NUMBER} s CPU\s+{NUMBER}x floor"
            rf"\s+\(to \.binpb {NUMBER}, back {NUMBER}\)",
            rf"this revision --plain\s+{NUMBER} s CPU\s+{NUMBER}x floor",
        ],
    ),
    (
        # A real server; each client verb's start against import grpc.
        "cli_startup.py",
        ["--repeat", "1"],
        [
            rf"omni-grpc abort SID\s+{NUMBER} s\s+{NUMBER}x",
            rf"omni-grpc run \(first output\)\s+{NUMBER} s\s+{NUMBER}x",
            rf"omni-grpc attach \(first output\)\s+{NUMBER} s\s+{NUMBER}x",
        ],
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
    (
        # Real servers (both codecs where the native one is built, and the floor),
        # with a Run caller and two Attach clients on one session.
        "grpc_stream.py",
        ["--repeat", "2", "--rounds", "1", "--subscribers", "new,1,3"],
        [
            *(
                rf" {n} {codec:>7}(\s+{NUMBER}){{8}}ms"
                for n in ("new", "  1", "  3")
                for codec in CODECS
            ),
            rf"   3   floor(\s+{NUMBER}){{4}}ms",
            *(
                rf"{codec}:\s+-?{NUMBER} us \(-?{NUMBER}\); "
                rf"one event to 1: {NUMBER} us, to 3: {NUMBER} us"
                for codec in CODECS
            ),
            rf"the hub's codec work per event .*[:,] pure {NUMBER} us; "
            rf"encoding an event's Run/Attach response \(once, for all its subscribers\): "
            rf"{NUMBER} us",
        ],
    ),
    (
        "metrics_overhead.py",  # built on grpc_stream.py's clients
        ["--repeat", "2", "--rounds", "1"],
        [rf"metrics on\s+{NUMBER}\s+{NUMBER}us", rf"metrics off\s+{NUMBER}\s+{NUMBER}us"],
    ),
    (
        "history_window.py",  # real servers, two sessions side by side
        ["--tasks", "5,40", "--repeat", "1", "--writer-tasks", "5"],
        [
            *(
                rf"\| {row} \| {NUMBER} ms \| {NUMBER} ms \({NUMBER}x\) \|"
                for row in (
                    r"tailLimit=20",
                    r"before=<middle>&limit=20",
                    r"GetHistory page_size=20",
                    r"Attach past the buffer \+ newest page",
                    r"SSE Last-Event-ID past the buffer \+ tailLimit=20",
                )
            ),
            rf"\| trace / index \| {NUMBER} MB / {NUMBER} KB \({NUMBER}%\)",
            rf"with the index: {NUMBER} us CPU per record\n  without: {NUMBER} us",
        ],
    ),
    (
        "connect_stream.py",  # one real server, every protocol of the HTTP port beside gRPC
        ["--repeat", "2", "--rounds", "1"],
        [
            rf"{name}\s+\d+\s+{NUMBER}\s+{NUMBER}\s+{NUMBER}x"
            for name in ("grpc", r"connect\+proto", r"connect\+json", "grpc-web", "grpc-web-text")
        ],
    ),
    (
        "loop_stall.py",  # real servers, a probe process, three hostile cases at 1/100 size
        [
            "--scale",
            "0.01",
            "--concurrency",
            "2",
            "--cases",
            "connect-bomb,grpc-web-text-bomb,sse-json-large",
        ],
        [
            rf"\| {case} \| 2 \| {NUMBER} \| {NUMBER} \| {NUMBER} \| {NUMBER} \| {NUMBER} \|"
            for case in ("connect-bomb", "grpc-web-text-bomb", "sse-json-large")
        ],
    ),
    (
        "large_messages.py",  # a real server, one large run, RSS sampled while it is sent
        ["--sizes", "1", "--readers", "2", "--backends", "memory", "--also", "", "--timeline"],
        [
            rf"\| memory \| 1 \| 2 \| {NUMBER} \| {NUMBER} \| {NUMBER} \| {NUMBER} \| {NUMBER}x "
            rf"\| \d+ \| {NUMBER} \| {NUMBER} \|",
            rf"\| memory \| 1 \| 2 \| thinking \| {NUMBER} \| {NUMBER}x \|",
        ],
    ),
    (
        "large_messages.py",  # the same with a prompt of many words
        ["--prompt=words", "--sizes=1", "--readers=1", "--backends=memory", "--also="],
        [
            rf"\| memory \| 1 \| 1 \| {NUMBER} \| {NUMBER} \| {NUMBER} \| {NUMBER} \| {NUMBER}x "
            rf"\| \d+ \| {NUMBER} \| {NUMBER} \|"
        ],
    ),
    (
        "large_message_copies.py",  # a real server under memray, one large run
        ["--mib", "2", "--top", "3"],
        [
            r"#1: RSS \d+ MiB; \d+ allocations of 1 MiB or more alive",
            # The response to the run's reader, built once from the event's bytes.
            rf"\| {NUMBER} \| {NUMBER} \| `runtime/agent_service\.py:\d+ _encode` \|",
        ],
    ),
    (
        "large_sse.py",  # a real server, reference SSE readers of one large task
        ["--mib", "0.25", "--readers", "2", "--rounds", "1"],
        [rf"\| this tree(?: \| {NUMBER} \({NUMBER}-{NUMBER}\)){{3}} \| {NUMBER}x \|"],
    ),
    (
        "http2.py",  # this server's stack only: the others are not dependencies
        ["--stacks", "uvicorn-h11+h2", "--requests", "10", "--runs", "2"],
        [
            rf"uvicorn-h11\+h2\s+no\s+sse h2\s+{NUMBER}\s+{NUMBER}x",
            rf"uvicorn-h11\+h2\s+yes\s+unary h2\s+{NUMBER}\s+{NUMBER}x",
        ],
    ),
    # Needs redis-server and half a minute of owner-loss waits: its imports only.
    ("scale_out.py", ["--help"], [r"--rounds ROUNDS"]),
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
