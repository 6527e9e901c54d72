"""The live tail folded from logged events equals the one the hub keeps as the
task runs, after every message: any process that reads the log can serve it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

from test_runtime_hub import prompt, until_end

from omni_grpc import protocol
from omni_grpc.convert import message_to_dict
from omni_grpc.engines.base import EngineMessage, JsonObject, RunOptions
from omni_grpc.runtime.events import HubEvent
from omni_grpc.runtime.hub import Hub
from omni_grpc.runtime.live_tail import fold_live_tail

IMG = "https://example.test/shot.png"


def script() -> list[JsonObject]:
    """Interleaved segments, a tool output with images, a child session's text."""
    child = "sub_1"
    return [
        protocol.request_begin(),
        protocol.partial_thinking("start"),
        protocol.partial_thinking("delta", "hmm"),
        protocol.partial_thinking("stop"),
        protocol.thinking("hmm"),
        protocol.partial_text("start", "Hel"),
        protocol.partial_text("delta", "lo"),
        protocol.partial_tool_call_output("start", "", "c1"),
        protocol.partial_tool_call_output("delta", "shot", "c1", images=[IMG]),
        protocol.with_origin(protocol.partial_text("start", "child "), child),
        protocol.with_origin(protocol.partial_text("delta", "says"), child),
        protocol.partial_text("stop"),
        protocol.assistant_text("Hello"),
        protocol.partial_tool_call_output("stop", "", "c1"),
        protocol.tool_call_output("shot", "c1", images=[IMG]),
        protocol.request_end("completed"),
    ]


class Gated:
    """Yields one scripted message per permit, so the test decides when."""

    name = "gated"

    def __init__(self) -> None:
        self.permits: asyncio.Queue[None] = asyncio.Queue()

    async def run(
        self, input: list[JsonObject], options: RunOptions
    ) -> AsyncIterator[EngineMessage]:
        for msg in script():
            await self.permits.get()
            yield msg
        await self.permits.get()  # still running until the test lets it end


async def test_the_fold_of_the_log_matches_the_hub_after_every_message(tmp_path: Path) -> None:
    engine = Gated()
    hub = Hub(engine, tmp_path)
    session_id, sub = await hub.run(prompt())
    seen: list[HubEvent] = []
    # Up to task_state running: the input is published before the engine runs.
    while not seen or seen[-1].server_event is None:
        event = await sub.next()
        assert event is not None
        seen.append(event)
    tails = []
    for _ in script():
        engine.permits.put_nowait(None)
        event = await asyncio.wait_for(sub.next(), 5)
        assert event is not None and event.message is not None
        seen.append(event)
        kept, folded = await hub.live_tail(session_id), fold_live_tail(seen)
        assert kept is not None and folded is not None
        assert folded.cursor == kept.cursor == event.event_id
        assert [message_to_dict(f) | {"timestamp": ""} for f in folded.fragments] == [
            message_to_dict(f) | {"timestamp": ""} for f in kept.fragments
        ]
        tails.append([message_to_dict(f) for f in folded.fragments])
    engine.permits.put_nowait(None)
    await until_end(sub)
    assert await hub.live_tail(session_id) is None
    # Mid-stream the tail holds the text prefix, the output with its images, and
    # the child's fragment under its origin; nothing once all are stopped.
    middle = tails[10]
    assert [(f["payload"]["type"], f.get("origin")) for f in middle] == [
        ("partial_text", None),
        ("partial_tool_call_output", None),
        ("partial_text", ["sub_1"]),
    ]
    assert middle[0]["payload"]["text"] == "Hello"
    assert middle[1]["payload"]["images"] == [IMG] and middle[1]["payload"]["output"] == "shot"
    assert middle[2]["payload"]["text"] == "child says"
    assert [f.get("origin") for f in tails[-1]] == [["sub_1"]]


def test_no_events_no_tail() -> None:
    assert fold_live_tail([]) is None


async def test_a_run_that_has_its_lease_but_has_published_nothing_has_no_tail(
    tmp_path: Path,
) -> None:
    """Between a new run's claim (the session reads as running) and its
    ``task_state running`` (published once its input is recorded), the log's
    last run is the one before, which has ended: its fragments are not live.
    The tail is None there, never the ended run's, else a page loading history
    then would paint the last turn's text as in progress, beside a history
    that does not yet hold the new turn's input."""
    engine = Gated()
    hub = Hub(engine, tmp_path)
    session_id, sub = await hub.run(prompt())
    for _ in range(len(script()) + 1):
        engine.permits.put_nowait(None)
    await until_end(sub)
    assert await hub.live_tail(session_id) is None
    # The next run's claim, before that run publishes anything.
    lease = await hub.backend.leases.acquire(session_id, "a-replica-starting-a-run")
    assert lease is not None and await hub.backend.leases.running([session_id])
    assert await hub.live_tail(session_id) is None
    await hub.backend.leases.release(lease)
    await hub.shutdown()
