"""User tools for the engine tests, loaded the way users load theirs
(``--engine-opt tools=fakes.slow_tools:TOOLS``)."""

from __future__ import annotations

import asyncio
from typing import Any

from omni_grpc.engines.tools import Tool, ToolContext, ToolResult


async def _sleep(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
    await asyncio.sleep(float(args["ms"]) / 1000)
    return ToolResult(f"slept {args['ms']} ms")


async def _explode(args: dict[str, Any], ctx: ToolContext) -> str:
    raise RuntimeError("kaboom")


SLEEP = Tool(
    name="sleep",
    description="Wait a number of milliseconds.",
    parameters={"type": "object", "properties": {"ms": {"type": "integer"}}, "required": ["ms"]},
    handler=_sleep,
)
EXPLODE = Tool(
    name="explode",
    description="Always fails.",
    parameters={"type": "object", "properties": {}},
    handler=_explode,
)
TOOLS = [SLEEP, EXPLODE]


def make_tools() -> list[Tool]:
    return TOOLS


NOT_TOOLS = [1, 2]
