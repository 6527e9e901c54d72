"""The bounded chaos run: benchmarks/durable_chaos.py at a small size, in CI.

Three real replicas on a real redis-server behind a real nginx; each fault of
issue #25 in turn, and combinations: SIGKILL of an owner, SIGSTOP past its
lease, a redis-server kill and restart on its AOF, an owner killed while
Redis is down, an owner's link to Redis frozen (a loopback proxy stopped),
Redis out of memory, client connections cut (nginx's worker killed under SSE
readers that reconnect with Last-Event-ID, Run calls cancelled, half of them
going on with an Attach on another replica), SIGSTOP during an OOM, and a
frozen link with the clients cut. For every session the clients' streams, the
event log, the trace, validate and resumeTrace are compared by the script,
which exits 1 on any mismatch or a close later than its fault's bound (plus
scheduling slack on a loaded machine). The longer soak is the same script
with more sessions (figures in BENCHMARKS.md).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from nginx_front import require_nginx
from redis_server import require_redis

SCRIPT = Path(__file__).parents[1] / "benchmarks" / "durable_chaos.py"
FAULTS = (
    "sigkill",
    "sigstop",
    "redis",
    "kill-during-redis",
    "freeze",
    "oom",
    "drop",
    "sigstop-during-oom",
    "freeze-and-drop",
)


def test_every_fault_leaves_every_stream_log_and_trace_agreeing() -> None:
    require_redis()
    require_nginx()
    done = subprocess.run(
        [sys.executable, SCRIPT.name, "--sessions", "3", "--faults", ",".join(FAULTS)],
        cwd=SCRIPT.parent,
        capture_output=True,
        text=True,
        timeout=1500,  # a guard against a hang; the run takes about three minutes
    )
    out = done.stdout
    assert done.returncode == 0, out + done.stderr[-6000:]
    assert re.search(rf"^sessions\s+{3 * len(FAULTS)}$", out, re.M), out
    assert re.search(rf"^faults injected\s+{len(FAULTS)}$", out, re.M), out
    events = re.search(r"^events seen by clients\s+(\d+)$", out, re.M)
    assert events is not None and int(events.group(1)) > 100 * len(FAULTS), out
    # The cuts reached the readers: each SSE reader was connected when nginx's
    # worker was killed (twice: drop, freeze-and-drop) and came back.
    reconnects = re.search(r"^SSE reconnects with Last-Event-ID\s+(\d+)$", out, re.M)
    assert reconnects is not None and int(reconnects.group(1)) >= 2 * 3, out
    for row in (
        "duplicated in a client stream",
        "out of order in a client stream",
        "client event differs from the log",
        "client events not in the log",
        "resync_required sent to a reader",
        "trace differs from the log",
        "an event after its run's abort",
        "trace does not validate",
        "tool call id used twice",
        "an output resumeTrace would not keep",
        "tracebacks in a replica's log",
        "closed later than its bound",
    ):
        assert re.search(rf"^{row}\s+0$", out, re.M), (row, out)
    # Every fault hit a run: closed in its bound, or resumed (#41; timed to
    # the continued run's first event).
    for fault in FAULTS:
        closed = re.search(rf"^time to close after {fault}\s+\(bound ", out, re.M)
        resumed = re.search(rf"^fault to first event of the resumed run after {fault}\s", out, re.M)
        assert closed or resumed, (fault, out)
    counts = (
        re.search(r"^runs resumed\s+(\d+)$", out, re.M),
        re.search(r"^runs closed\s+(\d+)$", out, re.M),
    )
    assert counts[0] is not None and counts[1] is not None, out
