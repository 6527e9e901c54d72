"""Tools an engine can offer a model: the safe built-ins and user tools.

A tool is a name, a description, a JSON Schema for its arguments and an async
handler. The built-ins only read, and only inside the session workspace: every
path is resolved (symlinks included) and refused when it lands outside it.

Users add their own with ``--engine-opt tools=module:object`` where ``object``
is a ``Tool``, an iterable of them, or a zero-argument callable returning either.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from omni_grpc._imports import import_object
from omni_grpc.vocabulary import StopReason

JsonObject = dict[str, Any]

# Longest file the read tool returns whole; longer ones are cut with a note.
MAX_READ_BYTES = 256 * 1024
MAX_LIST_ENTRIES = 1000


class ToolError(Exception):
    """A tool's failure, reported to the model as ``[tool error] <message>``."""


@dataclass(frozen=True)
class ToolContext:
    session_id: str
    workspace: Path


@dataclass(frozen=True)
class ToolResult:
    output: str
    images: list[str] = field(default_factory=list)
    # "completed" or "failed": the stop_reason of the tool_call_output.
    status: str = StopReason.COMPLETED


ToolHandler = Callable[[JsonObject, ToolContext], Awaitable[ToolResult | str]]


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: JsonObject
    handler: ToolHandler
    # Read-only tools may run under the server's read-only approval mode.
    read_only: bool = False

    def definition(self) -> JsonObject:
        """The ToolDefinition (name, description, parameters) in reference order."""
        return {"name": self.name, "description": self.description, "parameters": self.parameters}


async def run_tool(tool: Tool | None, name: str, arguments: str, ctx: ToolContext) -> ToolResult:
    """Runs one call; every failure becomes a ``failed`` result, never an exception."""
    if tool is None:
        return ToolResult(f"[tool error] unknown tool {name!r}", status=StopReason.FAILED)
    try:
        args = _parse_arguments(arguments)
        result = await tool.handler(args, ctx)
    except asyncio.CancelledError:
        raise
    except ToolError as exc:
        return ToolResult(f"[tool error] {exc}", status=StopReason.FAILED)
    except Exception as exc:  # a user tool's bug must not end the run
        return ToolResult(f"[tool error] {type(exc).__name__}: {exc}", status=StopReason.FAILED)
    return ToolResult(result) if isinstance(result, str) else result


def _parse_arguments(arguments: str) -> JsonObject:
    if not arguments.strip():
        return {}
    try:
        value = orjson.loads(arguments)
    except orjson.JSONDecodeError as exc:
        raise ToolError(f"the arguments are not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ToolError("the arguments must be a JSON object")
    return value


# ---- workspace confinement ----------------------------------------------------


def resolve_in_workspace(workspace: Path, requested: object) -> Path:
    """``requested`` resolved against the workspace; refuses anything outside it."""
    if not isinstance(requested, str) or not requested:
        raise ToolError("'path' must be a non-empty string")
    if "\x00" in requested:
        raise ToolError("'path' contains a NUL byte")
    root = workspace.resolve()
    target = (root / requested).resolve()
    if not target.is_relative_to(root):
        raise ToolError(f"{requested}: outside the workspace")
    return target


def _relative(workspace: Path, target: Path) -> str:
    rel = target.relative_to(workspace.resolve()).as_posix()
    return rel or "."


# ---- built-in tools -----------------------------------------------------------


async def _read_file(args: JsonObject, ctx: ToolContext) -> ToolResult:
    target = resolve_in_workspace(ctx.workspace, args.get("path"))
    offset = _positive_int(args, "offset", 1)
    limit = _positive_int(args, "limit", 2000)
    if not target.is_file():
        raise ToolError(f"{_display(args)}: no such file")
    data = await asyncio.to_thread(_read_prefix, target)
    if b"\x00" in data[:8192]:
        raise ToolError(f"{_display(args)}: a binary file")
    text = data.decode("utf-8", errors="replace")
    lines = text.splitlines()
    chosen = lines[offset - 1 : offset - 1 + limit]
    # Numbered like `cat -n`, which is what models are trained to read.
    body = "\n".join(f"{offset + i:6d}\t{line}" for i, line in enumerate(chosen))
    notes = []
    if len(data) > MAX_READ_BYTES:
        notes.append(f"[truncated: the file is longer than {MAX_READ_BYTES} bytes]")
    if offset - 1 + limit < len(lines):
        notes.append(f"[{len(lines) - (offset - 1 + limit)} more lines]")
    output = "\n".join([body, *notes]) if notes else body
    return ToolResult(output or "[empty file]")


def _read_prefix(path: Path) -> bytes:
    with path.open("rb") as fh:
        return fh.read(MAX_READ_BYTES + 1)


async def _list_directory(args: JsonObject, ctx: ToolContext) -> ToolResult:
    target = resolve_in_workspace(ctx.workspace, args.get("path", "."))
    if not target.is_dir():
        raise ToolError(f"{_display(args)}: not a directory")
    entries = await asyncio.to_thread(_list_entries, target)
    shown = entries[:MAX_LIST_ENTRIES]
    lines = [f"{name}/" if is_dir else name for name, is_dir in shown]
    if len(entries) > MAX_LIST_ENTRIES:
        lines.append(f"[{len(entries) - MAX_LIST_ENTRIES} more entries]")
    header = f"{_relative(ctx.workspace, target)}:"
    return ToolResult("\n".join([header, *lines]) if lines else f"{header}\n[empty directory]")


def _list_entries(target: Path) -> list[tuple[str, bool]]:
    return sorted((child.name, child.is_dir()) for child in target.iterdir())


def _positive_int(args: Mapping[str, Any], key: str, default: int) -> int:
    value = args.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ToolError(f"'{key}' must be a positive integer")
    return value


def _display(args: Mapping[str, Any]) -> str:
    return str(args.get("path", "."))


READ_FILE = Tool(
    name="read_file",
    description="Read a text file in the workspace, with line numbers.",
    parameters={
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "A path relative to the workspace."},
            "offset": {"type": "integer", "description": "The first line to read (1-based)."},
            "limit": {"type": "integer", "description": "How many lines to read."},
        },
        "required": ["path"],
    },
    handler=_read_file,
    read_only=True,
)

LIST_DIRECTORY = Tool(
    name="list_directory",
    description="List a directory in the workspace; directories end with '/'.",
    parameters={
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "A path relative to the workspace."},
        },
    },
    handler=_list_directory,
    read_only=True,
)

BUILTIN_TOOLS: tuple[Tool, ...] = (READ_FILE, LIST_DIRECTORY)


# ---- user tools -----------------------------------------------------------------


def load_tools(spec: str) -> list[Tool]:
    """Imports ``module:object`` and returns the tools it names.

    Raises ``ValueError`` with the spec in the message when it cannot.
    """
    try:
        obj = import_object(spec)
    except LookupError as exc:
        raise ValueError(f"tools spec {spec!r}: {exc}") from exc
    if callable(obj) and not isinstance(obj, Tool):
        obj = obj()
    tools = [obj] if isinstance(obj, Tool) else list(obj) if isinstance(obj, Iterable) else None
    if tools is None or not all(isinstance(t, Tool) for t in tools):
        raise ValueError(f"tools spec {spec!r}: expected a Tool or an iterable of Tools")
    return tools


def merge_tools(*groups: Iterable[Tool]) -> dict[str, Tool]:
    """Tools by name, refusing two tools with one name (the model could not tell them apart)."""
    merged: dict[str, Tool] = {}
    for group in groups:
        for tool in group:
            if tool.name in merged:
                raise ValueError(f"two tools are named {tool.name!r}")
            merged[tool.name] = tool
    return merged
