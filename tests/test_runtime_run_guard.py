"""The hub closes a run whose engine left its stream unfinished, with what the
streaming rules say is still open, so every reader sees a well-formed run."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_protocol_streaming import COMPLETES, disciplined_stream, fragment_issues, untimed
from test_runtime_hub import prompt, until_end

from omni_grpc import protocol
from omni_grpc.convert import message_to_dict
from omni_grpc.engines.base import EngineMessage, JsonObject, RunOptions
from omni_grpc.runtime.hub import Hub
from omni_grpc.trace.validate import TraceValidator
from omni_grpc.vocabulary import AbortKind

IMG = "https://example.test/a.png"


def leaves(*messages: JsonObject) -> type:
    class Leaves:
        name = "leaves"

        async def run(
            self, input: list[JsonObject], options: RunOptions
        ) -> AsyncIterator[EngineMessage]:
            for msg in messages:
                yield msg

    return Leaves


CASES = {
    "an open fragment": (
        protocol.tool_call("read", "{}", "c1"),
        protocol.partial_tool_call_output("start", "", "c1"),
        protocol.partial_tool_call_output("delta", "half", "c1", images=[IMG]),
    ),
    "a stop without its complete message": (
        protocol.partial_text("start", "done"),
        protocol.partial_text("stop"),
    ),
    "an open request": (protocol.request_begin(),),
}


@pytest.mark.parametrize("case", CASES)
async def test_an_engine_that_returns_mid_stream_gets_its_run_closed(
    tmp_path: Path, case: str
) -> None:
    hub = Hub(leaves(*CASES[case])(), tmp_path)
    _, sub = await hub.run(prompt())
    events = await until_end(sub)
    messages = [orjson.loads(e.data) for e in events if e.message is not None]
    validator = TraceValidator(trace=False)
    issues = [i for n, m in enumerate(messages, 1) for i in validator.check(n, m)]
    issues += validator.finish()
    assert [i for i in issues if i.severity == "error"] == []
    last = events[-2]  # then task_state idle
    assert last.message is not None and last.message.WhichOneof("payload") == "abort"
    assert last.abort_kind is AbortKind.ENGINE_FAILURE
    assert last.message.abort.reason == "engine ended with its stream unfinished"
    if case == "an open fragment":
        (output,) = [m for m in messages if m["payload"]["type"] == "tool_call_output"]
        assert output["payload"]["images"] == [IMG] and output["payload"]["output"] == "half"
        assert output["payload"]["stop_reason"] == "failed"


async def test_a_finished_stream_is_left_alone(tmp_path: Path) -> None:
    hub = Hub(leaves(protocol.request_begin(), protocol.request_end("completed"))(), tmp_path)
    _, sub = await hub.run(prompt())
    kinds = [orjson.loads(e.data).get("payload", {}).get("type") for e in await until_end(sub)]
    assert "abort" not in kinds


class CrashesAfter:
    name = "crashes-after"

    def __init__(self, messages: list[JsonObject]) -> None:
        self.messages = messages

    async def run(
        self, input: list[JsonObject], options: RunOptions
    ) -> AsyncIterator[EngineMessage]:
        for msg in self.messages:
            yield msg
        raise RuntimeError("cut here")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(disciplined_stream(), st.data())
def test_any_crash_point_leaves_a_well_formed_stream_and_trace(
    msgs: list[JsonObject], data: st.DataObject
) -> None:
    """An engine streaming well, then crashing anywhere: the hub's published
    stream and the recorded trace both pass the fragment checks."""
    cut = msgs[: data.draw(st.integers(0, len(msgs)))]

    async def scenario(root: Path) -> tuple[list[JsonObject], list[JsonObject]]:
        hub = Hub(CrashesAfter(cut), root)
        session_id, sub = await hub.run(prompt())
        events = await until_end(sub)
        stream = [orjson.loads(e.data) for e in events if e.message is not None]
        trace = [message_to_dict(m) async for m in await hub.history(session_id)]
        await hub.shutdown()
        return stream, trace

    with tempfile.TemporaryDirectory() as root:
        stream, trace = asyncio.run(scenario(Path(root)))
    assert fragment_issues(stream) == []
    assert stream[-1]["payload"] == {"type": "abort", "reason": "engine error: cut here"}
    # The trace holds the complete messages of every segment, closed ones included.
    completes = [m for m in stream if m["payload"]["type"] in COMPLETES]
    assert [untimed(m) for m in trace if m["payload"].get("type") in COMPLETES] == [
        untimed(m) for m in completes
    ]
