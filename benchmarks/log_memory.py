"""Memory a session's replay window really holds, per buffered event.

Fills one in-memory event log with the demo engine's kind of traffic (small
``partial_text`` deltas) up to the window's 10,000 events, then another with
large messages up to its 8 MB cap, and reports the process's RSS growth per
event and per session, beside what the window counts (the reference's UTF-16
units). Three ways of keeping an event are measured, each in a fresh process
(RSS freed by one fill would otherwise be reused by the next):

* ``orjson buffer``: the JSON kept in orjson's output buffer (4 KiB at least);
* ``json + protobuf``: right-sized JSON with the decoded protobuf beside it;
* ``json only``: what the log keeps now (``HubEvent.stored``).

    .venv/bin/python benchmarks/log_memory.py
"""

from __future__ import annotations

import asyncio
import gc
import subprocess
import sys
from collections.abc import Callable

from omni_grpc import protocol
from omni_grpc.convert import message_from_dict, serialize_message
from omni_grpc.runtime import bodies
from omni_grpc.runtime.events import EventBody, HubEvent
from omni_grpc.runtime.memory_log import MemoryEventLog
from omni_grpc_proto.omni.v1 import omni_pb2

VARIANTS = ("orjson buffer", "json + protobuf", "json only")


def rss() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * 4096


def unsized(msg: omni_pb2.OmniMessage) -> EventBody:
    return EventBody(msg, None, serialize_message(msg))


def small(n: int) -> omni_pb2.OmniMessage:
    return message_from_dict(protocol.partial_text("delta", f"word{n} "))


def large(n: int) -> omni_pb2.OmniMessage:
    return message_from_dict(protocol.assistant_text(f"{n:08d}" + "x" * 20_000))


CASES: dict[str, tuple[Callable[[int], omni_pb2.OmniMessage], int]] = {
    "small deltas": (small, 10_000),
    "20 kB texts": (large, 600),
}


async def fill(case: str, variant: str) -> None:
    make, count = CASES[case]
    body: Callable[[omni_pb2.OmniMessage], EventBody] = bodies.message_body
    if variant == "orjson buffer":
        body = unsized
    if variant != "json only":
        HubEvent.stored = lambda self: self  # type: ignore[method-assign]
    log = MemoryEventLog(bodies.resync_required_body())
    gc.collect()
    before = rss()
    for n in range(count):
        await log.publish(body(make(n)))
    gc.collect()
    grown = rss() - before
    events, units = log.buffer_stats()
    print(f"{events} {units} {grown / events}")


def main() -> None:
    for case in CASES:
        for variant in VARIANTS:
            out = subprocess.run(
                [sys.executable, __file__, case, variant],
                check=True,
                capture_output=True,
                text=True,
            ).stdout.split()
            events, units, per_event = int(out[0]), int(out[1]), float(out[2])
            print(
                f"{case:>12} {variant:>15}: {events:,} events, {units:,} units counted, "
                f"{per_event:,.0f} bytes RSS per event, {per_event * events / 2**20:,.1f} MiB "
                f"per session window"
            )


if __name__ == "__main__":
    if len(sys.argv) == 3:
        asyncio.run(fill(sys.argv[1], sys.argv[2]))
    else:
        main()
