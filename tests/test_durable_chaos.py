"""The bounded chaos run: benchmarks/durable_chaos.py at a small size, in CI.

Three real replicas on a real redis-server; each fault of issue #25 in turn
(SIGKILL of an owner, SIGSTOP past its lease, a redis-server kill and
restart on its AOF, an owner killed while Redis is down); for every session
the clients' streams, the event log, the trace and validate are compared by
the script, which exits 1 on any mismatch. The longer soak is the same script
with more sessions (figures in BENCHMARKS.md).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from redis_server import require_redis

SCRIPT = Path(__file__).parents[1] / "benchmarks" / "durable_chaos.py"


def test_every_fault_leaves_every_stream_log_and_trace_agreeing() -> None:
    require_redis()
    done = subprocess.run(
        [sys.executable, SCRIPT.name, "--sessions", "3"],
        cwd=SCRIPT.parent,
        capture_output=True,
        text=True,
        timeout=900,
    )
    out = done.stdout
    assert done.returncode == 0, out + done.stderr[-4000:]
    assert re.search(r"^sessions\s+12$", out, re.M), out
    assert re.search(r"^faults injected\s+4$", out, re.M), out
    for row in (
        "duplicated in a client stream",
        "out of order in a client stream",
        "client event differs from the log",
        "client events not in the log",
        "trace differs from the log",
        "trace does not validate",
        "tool call id used twice",
        "closed later than its bound",
    ):
        assert re.search(rf"^{row}\s+0$", out, re.M), (row, out)
    for fault in ("sigkill", "sigstop", "redis", "kill-during-redis"):
        assert re.search(rf"^time to close after {fault}\s+\(bound ", out, re.M), (fault, out)
