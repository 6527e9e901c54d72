"""Memory a session's replay window really holds, per buffered event.

Fills one in-memory event log with the demo engine's kind of traffic (small
``partial_text`` deltas) up to the window's 10,000 events, then another with
large messages up to its 8 MB cap, and reports the process's RSS growth per
event and per session, beside what the window counts (the reference's UTF-16
units). The same run measures the bodies as the hub made them before
(orjson's output buffer kept as is) for the ratio.

    .venv/bin/python benchmarks/log_memory.py
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable

from omni_grpc import protocol
from omni_grpc.convert import message_from_dict, serialize_message
from omni_grpc.runtime import bodies
from omni_grpc.runtime.events import EventBody
from omni_grpc.runtime.memory_log import MemoryEventLog
from omni_grpc_proto.omni.v1 import omni_pb2


def rss() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * 4096


def unsized(msg: omni_pb2.OmniMessage) -> EventBody:
    return EventBody(msg, None, serialize_message(msg))


async def fill(make: Callable[[int], omni_pb2.OmniMessage], body: Callable[..., EventBody],
               count: int) -> tuple[float, int, int]:  # fmt: skip
    """(RSS bytes per event, events kept, units counted) for one full window."""
    log = MemoryEventLog(bodies.resync_required_body())
    gc.collect()
    before = rss()
    for n in range(count):
        await log.publish(body(make(n)))
    gc.collect()
    grown = rss() - before
    events, units = log.buffer_stats()
    await log.close()
    return grown / events, events, units


def small(n: int) -> omni_pb2.OmniMessage:
    return message_from_dict(protocol.partial_text("delta", f"word{n} "))


def large(n: int) -> omni_pb2.OmniMessage:
    return message_from_dict(protocol.assistant_text(f"{n:08d}" + "x" * 20_000))


async def main() -> None:
    for name, make, count in (("small deltas", small, 10_000), ("20 kB texts", large, 600)):
        for label, body in (("before", unsized), ("now", bodies.message_body)):
            per_event, events, units = await fill(make, body, count)
            print(
                f"{name:>12} {label:>6}: {events:,} events, {units:,} units counted, "
                f"{per_event:,.0f} bytes RSS per event, {per_event * events / 2**20:,.1f} MiB "
                f"per session window"
            )


if __name__ == "__main__":
    asyncio.run(main())
