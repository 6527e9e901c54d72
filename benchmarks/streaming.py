"""The streaming state machine's cost per message, beside the codec work the
hub already does for every event, measured in the same run.

Every message a run publishes goes through ``RunGuard.observe`` (the hub's
view of open fragments, for the live tail and for closing a failed run), so
its cost is paid once per event on the server's hot path.

* baseline: ``serialize_message`` of each message, which the hub does once
  per event (for the trace and every transport);
* guard: ``RunGuard.observe`` on the same messages (JSON, as engines yield);
* fold: ``live_fragments`` over the same messages as protobuf, as a replica
  builds the live tail from its log (once per ``GET /messages``).

The stream is the demo engine's shape: text segments of many deltas and
tool-call segments, with their complete messages.

Usage: python benchmarks/streaming.py [--segments 400] [--repeat 7]
"""

from __future__ import annotations

import argparse
from typing import Any

from _common import best_seconds  # benchmarks/_common.py, beside this file

from omni_grpc import protocol as b
from omni_grpc.convert import message_from_dict, serialize_message
from omni_grpc.protocol.streaming import live_fragments
from omni_grpc.runtime.run_guard import RunGuard


def stream(segments: int) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = []
    for i in range(segments):
        msgs.append(b.partial_text("start"))
        msgs += [b.partial_text("delta", "word ") for _ in range(50)]
        msgs += [b.partial_text("stop"), b.assistant_text("word " * 50)]
        call = f"call_{i}"
        msgs.append(b.partial_tool_call("start", "read", "", call))
        msgs += [b.partial_tool_call("delta", "read", '{"a":1}', call) for _ in range(10)]
        msgs += [b.partial_tool_call("stop", "read", "", call), b.tool_call("read", "{}", call)]
    return msgs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--segments", type=int, default=400)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    msgs = stream(args.segments)
    protos = [message_from_dict(m) for m in msgs]

    def baseline() -> None:
        for m in protos:
            serialize_message(m)

    def guard() -> None:
        observer = RunGuard()
        for m in msgs:
            observer.observe(m)

    def fold() -> None:
        live_fragments(protos)

    base = best_seconds(baseline, args.repeat)
    print(f"{len(msgs):,} messages, best of {args.repeat}")
    print(f"{'':28} {'messages/s':>12} {'us/message':>11} {'vs codec':>9}")
    for name, run in (("serialize_message (codec)", baseline),
                      ("RunGuard.observe (JSON)", guard),
                      ("live_fragments (protobuf)", fold)):  # fmt: skip
        seconds = best_seconds(run, args.repeat)
        rate = len(msgs) / seconds
        per = seconds / len(msgs) * 1e6
        print(f"{name:28} {rate:>12,.0f} {per:>11.2f} {seconds / base:>8.1f}x")


if __name__ == "__main__":
    main()
