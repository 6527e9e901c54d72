"""Drives an engine directly, the way the hub does, and records what it yields."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omni_grpc.convert import message_from_dict, message_to_dict
from omni_grpc.engines.base import AbortSignal, Decision, Engine, RunOptions
from omni_grpc.runtime.trace_store import ShardedTrace
from omni_grpc.trace import TraceWriter

JsonObject = dict[str, Any]


@dataclass
class Approver:
    """An approve callback answering from ``decisions`` (default allow), recording each call."""

    decisions: dict[str, Decision] = field(default_factory=dict)
    calls: list[JsonObject] = field(default_factory=list)
    delay: float = 0.0
    default: Decision = "allow"

    async def __call__(self, tool_call: JsonObject) -> Decision:
        self.calls.append(tool_call)
        if self.delay:
            await asyncio.sleep(self.delay)
        return self.decisions.get(tool_call["payload"]["tool_call_id"], self.default)


def as_dict(message: Any) -> JsonObject:
    return message if isinstance(message, dict) else message_to_dict(message)


async def collect(
    engine: Engine,
    run_input: list[JsonObject],
    *,
    workspace: Path,
    approve: Approver | None = None,
    abort: AbortSignal | None = None,
    trace_path: Path | None = None,
    session_id: str = "session-test",
    thinking_level: str | None = None,
    on_message: Callable[[JsonObject], None] | None = None,
    metadata: JsonObject | None = None,
    record: bool = False,
) -> list[JsonObject]:
    """``record``: the run's input and recordable messages are appended to
    ``trace_path`` as the hub records them (the session's past for the next run)."""
    writer = TraceWriter(trace_path) if record and trace_path is not None else None
    if writer is not None:
        for item in run_input:
            writer.write(message_from_dict(item))
    options = RunOptions(
        session_id=session_id,
        approve=approve or Approver(),
        abort=abort or AbortSignal(),
        thinking_level=thinking_level,
        workspace=workspace,
        trace=ShardedTrace([trace_path]) if trace_path is not None else None,
        metadata=metadata or {},
    )
    out: list[JsonObject] = []
    async for message in engine.run(run_input, options):
        msg = as_dict(message)
        out.append(msg)
        if writer is not None:
            writer.write(message_from_dict(msg))  # partials and child messages are refused
        if on_message is not None:
            on_message(msg)
    return out


def kinds(messages: list[JsonObject]) -> list[str]:
    """Payload types, with the partial phase: ``partial_text:start``."""
    out = []
    for m in messages:
        p = m["payload"]
        kind = p.get("type", "session_meta")
        out.append(f"{kind}:{p['event_type']}" if "event_type" in p else kind)
    return out


def payloads(messages: list[JsonObject], kind: str) -> list[JsonObject]:
    return [m["payload"] for m in messages if m["payload"].get("type") == kind]
