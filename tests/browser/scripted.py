"""An engine whose replies the browser tests choose, through the real engine contract.

The prompt picks the script:

* ``say: TEXT``: the reply is TEXT, streamed word by word (Markdown tests);
* ``tool: N``: a ``read_file`` call (through the live approval), its output of
  N numbered lines with a PNG image, then a short reply;
* ``fail``: the model request fails and the engine gives up (a failed run);
* ``hang``: a reply opens and waits, with no text, until the run is stopped;
* ``tool-hang``: a ``read_file`` call, approved, that runs until the run is
  stopped (it never has an output);
* ``slow``: a long reply streamed slowly until it ends or the run is stopped.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import re
import struct
import zlib
from collections.abc import AsyncIterator
from typing import Any

from omni_grpc import protocol
from omni_grpc.engines.base import Decision, RunOptions
from omni_grpc.protocol.streaming import Segment, SegmentKind
from omni_grpc.vocabulary import USER_ABORT_REASON, StopReason

Json = dict[str, Any]


def png(width: int, height: int, rgb: tuple[int, int, int]) -> str:
    """A solid-colour PNG as a data: URL."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    row = b"\x00" + bytes(rgb) * width
    raw = zlib.compress(row * height)
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    data = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", raw) + chunk(b"IEND", b"")
    return "data:image/png;base64," + base64.b64encode(data).decode()


IMAGE = png(48, 32, (47, 111, 235))

# Prompts a person would type, for the screenshots: each stands for a script.
SCRIPTS = {
    "How do I rotate the app's logs?": "say: "
    "Use **logrotate**, which most distributions ship:\n\n"
    "1. Install it: `apt install logrotate`\n"
    "2. Add a rule in `/etc/logrotate.d/app`:\n\n"
    "```conf\n/var/log/app/*.log {\n    daily\n    rotate 7\n    compress\n"
    "    missingok\n}\n```\n\n"
    "Run `logrotate -d /etc/logrotate.d/app` to check it without touching anything; "
    "see the [manual](https://linux.die.net/man/8/logrotate) for the other options.",
    "What is in notes/big.txt?": "tool: 30",
}


class _Stopped(Exception):
    pass


class ScriptedEngine:
    name = "scripted"

    def __init__(self, pacing: float = 0.0) -> None:
        self.pacing = pacing
        self._calls = 0

    def is_read_only_tool(self, name: str) -> bool:
        return True

    async def run(self, input: list[Json], options: RunOptions) -> AsyncIterator[Json]:
        prompt = ""
        for msg in input:
            payload = msg.get("payload", {})
            if payload.get("type") == "text":
                prompt = str(payload.get("text", ""))
        prompt = SCRIPTS.get(prompt, prompt)
        run = _Run(self, options)
        try:
            async for msg in run.play(prompt):
                yield msg
        except _Stopped:
            for msg in run.closing():
                yield msg


class _Run:
    def __init__(self, engine: ScriptedEngine, options: RunOptions) -> None:
        self.engine = engine
        self.options = options
        self.open: Segment | None = None
        self.request_open = False
        self.pacing = engine.pacing

    async def tick(self, pacing: float | None = None) -> None:
        wait = self.pacing if pacing is None else pacing
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.options.abort.wait(), wait)
        if self.options.abort.is_set():
            raise _Stopped

    async def segment(
        self, kind: SegmentKind, chunks: list[str], call_id: str = "", name: str = ""
    ) -> AsyncIterator[Json]:
        seg = self.open = Segment(kind, name=name, tool_call_id=call_id)
        yield seg.start()
        for chunk in chunks:
            await self.tick()
            yield seg.delta(chunk)
        self.open = None
        for msg in seg.finish(StopReason.COMPLETED):
            yield msg

    def closing(self) -> list[Json]:
        out: list[Json] = []
        if self.open is not None:
            out.extend(self.open.finish(StopReason.ABORTED))
        if self.request_open:
            out.append(protocol.request_end(StopReason.ABORTED))
        out.append(protocol.abort_event(self.options.abort.reason or USER_ABORT_REASON))
        return out

    def usage(self, total: int) -> Json:
        counts = {"cache_read": 0, "cache_write": total - 1, "output": 1, "total": total}
        return protocol.token_usage(counts, counts)

    async def reply(self, text: str) -> AsyncIterator[Json]:
        yield protocol.request_begin()
        self.request_open = True
        async for msg in self.segment(SegmentKind.TEXT, re.findall(r"\S+\s*|\s+", text)):
            yield msg
        yield self.usage(max(2, len(text) // 4))
        self.request_open = False
        yield protocol.request_end(StopReason.COMPLETED)

    async def play(self, prompt: str) -> AsyncIterator[Json]:
        if prompt.startswith("say: "):
            async for msg in self.reply(prompt[len("say: ") :]):
                yield msg
        elif prompt.startswith("tool: "):
            lines = int(prompt[len("tool: ") :])
            self.engine._calls += 1
            call_id = f"call_read_{self.engine._calls}"
            args = f'{{"path": "notes/big.txt", "lines": {lines}}}'
            yield protocol.request_begin()
            self.request_open = True
            async for msg in self.segment(SegmentKind.TOOL_CALL, [args], call_id, "read_file"):
                yield msg
            call = protocol.tool_call("read_file", args, call_id)
            decision = await self.options.approve(call)
            yield protocol.approval_decision(decision, call_id)
            yield self.usage(12)
            self.request_open = False
            yield protocol.request_end(StopReason.COMPLETED)
            if decision != Decision.ALLOW:
                yield protocol.denied_tool_output(call, decision)
            else:
                output = "\n".join(f"line {n}: the quick brown fox" for n in range(1, lines + 1))
                yield protocol.tool_call_output(output, call_id, images=[IMAGE])
            async for msg in self.reply(f"The file has {lines} lines."):
                yield msg
        elif prompt == "fail":
            yield protocol.request_begin()
            yield protocol.request_end(StopReason.FAILED, error_message="upstream answered 500")
            yield protocol.abort_event("llm request error: upstream answered 500")
        elif prompt == "tool-hang":
            self.engine._calls += 1
            call_id = f"call_read_{self.engine._calls}"
            args = '{"path": "notes/slow.txt"}'
            yield protocol.request_begin()
            self.request_open = True
            async for msg in self.segment(SegmentKind.TOOL_CALL, [args], call_id, "read_file"):
                yield msg
            call = protocol.tool_call("read_file", args, call_id)
            decision = await self.options.approve(call)
            yield protocol.approval_decision(decision, call_id)
            yield self.usage(12)
            self.request_open = False
            yield protocol.request_end(StopReason.COMPLETED)
            await self.tick(3600)  # the tool runs until the run is stopped
        elif prompt == "hang":
            yield protocol.request_begin()
            self.request_open = True
            self.open = Segment(SegmentKind.TEXT)
            yield self.open.start()
            await self.tick(3600)
        else:  # "slow", and anything else
            self.pacing = max(self.pacing, 0.05)
            words = [f"word{n} " for n in range(120)]
            async for msg in self.reply("".join(words)):
                yield msg
