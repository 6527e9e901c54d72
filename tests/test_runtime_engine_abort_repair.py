"""An engine's own ``abort`` that leaves its stream open is closed by the hub
before the abort is recorded.

A relayed producer (the reference server behind ``sse+http://``, a gRPC
upstream) ends an interrupted turn with ``abort`` while its request is still
open, a fragment half streamed, or a tool call without output. Recorded as is,
``validate`` warned (request never ended, tool_call has no output). The hub's
run guard now closes what is open first, as it does for an engine that
crashes: each fragment's stop and complete message, ``request_end aborted``,
an output for each call that never got one (the denial, when the call was
denied, else the reference's "tool aborted" placeholder), then the engine's
abort, unchanged.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from omni_grpc import protocol
from omni_grpc.convert import message_from_dict
from omni_grpc.engines.base import JsonObject, RunOptions
from omni_grpc.engines.sse_upstream import SseUpstreamEngine
from omni_grpc.runtime.approvals import ApprovalMode
from omni_grpc.runtime.bodies import is_task_end
from omni_grpc.runtime.hub import Hub, RunRequest
from omni_grpc.trace.resume import read_trace
from omni_grpc.trace.validate import TraceValidator
from omni_grpc.transport.sse.server import HttpServer
from tests.fakes.reference_server import ABORT_REASON, ReferenceServer

WAIT = 30.0


def issues(data: Path) -> list[Any]:
    [shard] = (data / "traces").glob("*/*.jsonl")
    records, skipped = read_trace(shard)
    assert skipped == []
    validator = TraceValidator(trace=True)
    found = [i for n, m in enumerate(records, 1) for i in validator.check(n, m)]
    return found + validator.finish()


def trace_payloads(data: Path) -> list[dict[str, Any]]:
    [shard] = (data / "traces").glob("*/*.jsonl")
    return [json.loads(line)["payload"] for line in shard.read_text().splitlines()]


class AbortsOpen:
    """Yields ``script`` (built per run), then its own abort, whatever is open."""

    name = "aborts-open"

    def __init__(self, script: list[JsonObject]) -> None:
        self.script = script

    async def run(self, input: list[JsonObject], options: RunOptions) -> AsyncIterator[JsonObject]:
        for msg in self.script:
            yield msg
        yield protocol.abort_event("upstream gave up")


CALL = protocol.tool_call("list_workspace", "{}", "call_a")
SCRIPTS = {
    "open request": [protocol.request_begin()],
    "open fragment": [
        protocol.request_begin(),
        protocol.partial_text("start"),
        protocol.partial_text("delta", "half a sent"),
    ],
    "allowed call without output": [
        protocol.request_begin(),
        CALL,
        protocol.approval_decision("allow", "call_a"),
    ],
    "denied call without output": [
        protocol.request_begin(),
        CALL,
        protocol.approval_decision("deny", "call_a"),
    ],
}


@pytest.mark.parametrize("case", list(SCRIPTS))
async def test_an_engine_abort_with_its_stream_open_is_closed_first(
    tmp_path: Path, case: str
) -> None:
    hub = Hub(AbortsOpen(SCRIPTS[case]), tmp_path / "data")
    try:
        sid, sub = await hub.run(RunRequest(input=[message_from_dict(protocol.user_text("q"))]))
        sub.close()
        await asyncio.wait_for(hub.wait_idle(sid), WAIT)
    finally:
        await hub.shutdown()
    assert issues(tmp_path / "data") == []
    payloads = trace_payloads(tmp_path / "data")
    # The engine's abort is recorded unchanged, last, once.
    assert payloads[-1] == {"type": "abort", "reason": "upstream gave up"}
    assert [p.get("type") for p in payloads].count("abort") == 1
    assert {"type": "request_end", "status": "aborted"} in payloads
    outputs = [p for p in payloads if p.get("type") == "tool_call_output"]
    if case == "denied call without output":
        assert [o["output"] for o in outputs] == ["Tool call denied by user."]
    elif case == "allowed call without output":
        assert [o["output"] for o in outputs] == [protocol.TOOL_ABORTED_PLACEHOLDER]
    if case == "open fragment":
        [text] = [p for p in payloads if p.get("type") == "text" and p["role"] == "assistant"]
        assert (text["text"], text["stop_reason"]) == ("half a sent", "aborted")


async def test_a_reference_upstream_aborted_mid_approval_leaves_a_trace_that_validates(
    tmp_path: Path,
) -> None:
    fake = ReferenceServer()
    server = HttpServer(fake.app, port=0)
    await server.start()
    local = Hub(SseUpstreamEngine(f"sse+{server.url}"), tmp_path / "data")
    try:
        sid, sub = await local.run(
            RunRequest(
                input=[message_from_dict(protocol.user_text("q"))], approval_mode=ApprovalMode.ASK
            )
        )

        async def read() -> None:
            async for event in sub:
                ev = event.server_event
                if ev is not None and ev.WhichOneof("kind") == "approval_request":
                    assert await local.abort(sid, "stop")  # while the upstream waits
                if is_task_end(event):
                    return

        await asyncio.wait_for(read(), WAIT)
    finally:
        await local.shutdown()
        await server.stop()
    assert issues(tmp_path / "data") == []
    payloads = trace_payloads(tmp_path / "data")
    assert payloads[-1] == {"type": "abort", "reason": ABORT_REASON}
    kinds = [p.get("type") for p in payloads]
    # The denial the abort made, after the request it ended (as tools run).
    assert kinds[-4:] == ["approval_decision", "request_end", "tool_call_output", "abort"]
