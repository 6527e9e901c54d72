"""A run cut at any point is closed answering each tool call exactly once (#25).

Whoever closes a run another party left unfinished (its owner after the
backend failed, a replica taking over a dead owner's run, the hub after an
engine gave up) asks ``RunGuard.closing_messages(answer_calls=True)``: the
open fragments' stops and complete messages, the request's end, an output for
each completed call without one, then ``abort``. A run cut while its tool's
output was streaming (between the output fragment's start and its complete
message) had that fragment's complete message, which is the call's output,
and then a second output for the same call from the calls still owed: the
chaos soak's ``second tool_call_output for 'call_demo_1'`` after a Redis
restart with an owner killed. Here the demo engine's whole stream, partials
included, is cut after every message, and the recordable part plus the close
must validate.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from fakes.harness import collect

from omni_grpc import protocol
from omni_grpc.convert import message_from_dict
from omni_grpc.engines.base import JsonObject
from omni_grpc.engines.demo import DemoEngine
from omni_grpc.runtime.run_guard import RunGuard
from omni_grpc.trace import TraceRecord
from omni_grpc.trace.validate import validate_records


def demo_stream(tmp_path: Path) -> list[JsonObject]:
    run_input = [protocol.user_text("list it")]
    out = asyncio.run(collect(DemoEngine(pacing=0), run_input, workspace=tmp_path))
    return run_input + out


def recordable(item: JsonObject) -> bool:
    return not str(item["payload"].get("type", "")).startswith("partial_") and not item.get(
        "origin"
    )


@pytest.mark.parametrize("aborted", [True, False], ids=["taken-over", "failed"])
def test_a_run_cut_after_any_message_is_closed_answering_each_call_once(
    tmp_path: Path, aborted: bool
) -> None:
    stream = demo_stream(tmp_path)
    kinds = [m["payload"].get("type") for m in stream]
    assert "partial_tool_call_output" in kinds  # the cut points that matter are there
    meta = protocol.session_meta(
        protocol.session_meta_payload("session-x", "omni-grpc", "demo", "unknown", "", "", "/w")
    )
    for cut in range(1, len(stream)):
        guard = RunGuard()
        for item in stream[:cut]:
            guard.observe(item)
        closing = guard.closing_messages(
            aborted=aborted, reason="taken over", error=None, answer_calls=True
        )
        trace = [meta, *(m for m in stream[:cut] if recordable(m)), *filter(recordable, closing)]
        outputs = [
            m["payload"]["tool_call_id"]
            for m in trace
            if m["payload"].get("type") == "tool_call_output"
        ]
        calls = [
            m["payload"]["tool_call_id"]
            for m in trace
            if m["payload"].get("type") == "tool_call"
            and m["payload"].get("stop_reason") == "completed"
        ]
        where = f"cut after message {cut} ({kinds[cut - 1]})"
        assert sorted(outputs) == sorted(calls), where  # each completed call, once
        records = [TraceRecord(i + 1, message_from_dict(m)) for i, m in enumerate(trace)]
        errors = [i for i in validate_records(records, trace=True) if i.severity == "error"]
        assert errors == [], where
