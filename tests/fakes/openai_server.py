"""A local OpenAI-compatible ``/v1/chat/completions`` server with scripted replies.

It stands in for a hosted LLM (which tests cannot call) and speaks the real
wire format: ``text/event-stream`` of ``data: {chat.completion.chunk}`` lines
ending in ``data: [DONE]``, or a JSON error body with a 4xx/5xx status. Each
request takes the next scripted ``Reply``; with none queued it echoes the last
user message, so it also serves demos and benchmarks:

    python tests/fakes/openai_server.py --port 8011
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

JsonObject = dict[str, Any]


# ---- script steps --------------------------------------------------------------


@dataclass(frozen=True)
class Chunk:
    """One ``data:`` event carrying a chat.completion.chunk's ``choices``/``usage``."""

    delta: JsonObject | None = None
    finish_reason: str | None = None
    usage: JsonObject | None = None


@dataclass(frozen=True)
class Raw:
    """Bytes written as they are (for malformed streams)."""

    text: str


@dataclass(frozen=True)
class Sleep:
    seconds: float


@dataclass(frozen=True)
class Drop:
    """Kill the connection mid-body (the client sees a dropped connection)."""


@dataclass
class Reply:
    steps: list[Chunk | Raw | Sleep | Drop] = field(default_factory=list)
    status: int = 200
    error: str = ""
    done: bool = True  # end with ``data: [DONE]``
    # Response headers, e.g. Retry-After on a 429.
    headers: dict[str, str] = field(default_factory=dict)


# ---- reply builders --------------------------------------------------------------


def usage(prompt: int, completion: int, cached: int = 0) -> JsonObject:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


def _pieces(text: str, n: int) -> list[str]:
    size = max(1, -(-len(text) // n))
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def text_reply(
    text: str,
    *,
    pieces: int = 3,
    reasoning: str = "",
    reasoning_field: str = "reasoning_content",
    tokens: tuple[int, int, int] | None = (10, 5, 0),
) -> Reply:
    steps: list[Chunk | Raw | Sleep | Drop] = [Chunk({"role": "assistant", "content": ""})]
    if reasoning:
        steps += [Chunk({reasoning_field: p}) for p in _pieces(reasoning, pieces)]
    steps += [Chunk({"content": p}) for p in _pieces(text, pieces)]
    steps.append(Chunk({}, finish_reason="stop"))
    if tokens is not None:
        steps.append(Chunk(usage=usage(*tokens)))
    return Reply(steps)


def tool_calls_reply(
    calls: Sequence[tuple[str, str, str]],
    *,
    text: str = "",
    tokens: tuple[int, int, int] = (20, 8, 0),
) -> Reply:
    """``calls`` are (id, name, arguments JSON); arguments stream in two pieces each."""
    steps: list[Chunk | Raw | Sleep | Drop] = [Chunk({"role": "assistant", "content": None})]
    if text:
        steps.append(Chunk({"content": text}))
    for index, (call_id, name, arguments) in enumerate(calls):
        head = {
            "index": index,
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": ""},
        }
        steps.append(Chunk({"tool_calls": [head]}))
        for piece in _pieces(arguments, 2):
            steps.append(
                Chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
            )
    steps.append(Chunk({}, finish_reason="tool_calls"))
    steps.append(Chunk(usage=usage(*tokens)))
    return Reply(steps)


def error_reply(status: int, message: str, headers: dict[str, str] | None = None) -> Reply:
    return Reply(status=status, error=message, headers=dict(headers or {}))


def stall_reply(seconds: float, *, after_text: str = "") -> Reply:
    """Starts streaming, optionally says ``after_text``, then goes silent."""
    steps: list[Chunk | Raw | Sleep | Drop] = [Chunk({"role": "assistant", "content": ""})]
    if after_text:
        steps.append(Chunk({"content": after_text}))
    steps.append(Sleep(seconds))
    return Reply(steps, done=False)


def drop_reply(after_text: str = "") -> Reply:
    steps: list[Chunk | Raw | Sleep | Drop] = [Chunk({"role": "assistant", "content": ""})]
    if after_text:
        steps.append(Chunk({"content": after_text}))
    steps.append(Drop())
    return Reply(steps, done=False)


# ---- the server ------------------------------------------------------------------


class _Dropped(Exception):
    pass


@dataclass
class Received:
    body: JsonObject
    headers: dict[str, str]
    # time.monotonic() when the request arrived.
    at: float = 0.0


class FakeOpenAI:
    """Starts on 127.0.0.1 with an OS-chosen port; use as a context manager."""

    def __init__(self, *, port: int = 0, model: str = "fake-model") -> None:
        self.model = model
        self.replies: deque[Reply] = deque()
        self.requests: list[Received] = []
        self._port = port
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._ids = 0

    def script(self, *replies: Reply) -> None:
        self.replies.extend(replies)

    @property
    def base_url(self) -> str:
        assert self._server is not None, "the server is not started"
        port = self._server.servers[0].sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}/v1"

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/v1/chat/completions", self._complete, methods=["POST"])])

    async def _complete(self, request: Request) -> Response:
        body = await request.json()
        self.requests.append(Received(body, dict(request.headers), time.monotonic()))
        reply = self.replies.popleft() if self.replies else self._echo(body)
        if reply.status != 200:
            error = {"error": {"message": reply.error, "type": "api_error", "code": reply.status}}
            return JSONResponse(error, status_code=reply.status, headers=reply.headers)
        self._ids += 1
        return StreamingResponse(
            self._stream(reply, f"chatcmpl-{self._ids}"), media_type="text/event-stream"
        )

    def _echo(self, body: JsonObject) -> Reply:
        last = ""
        for message in body.get("messages", []):
            if message.get("role") == "user" and isinstance(message.get("content"), str):
                last = message["content"]
        return text_reply(f"echo: {last}")

    async def _stream(self, reply: Reply, chunk_id: str) -> AsyncIterator[bytes]:
        for step in reply.steps:
            if isinstance(step, Sleep):
                await asyncio.sleep(step.seconds)
            elif isinstance(step, Drop):
                raise _Dropped("scripted connection drop")
            elif isinstance(step, Raw):
                yield step.text.encode()
            else:
                yield b"data: " + json.dumps(self._chunk(step, chunk_id)).encode() + b"\n\n"
        if reply.done:
            yield b"data: [DONE]\n\n"

    def _chunk(self, step: Chunk, chunk_id: str) -> JsonObject:
        chunk: JsonObject = {
            "id": chunk_id,
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": self.model,
            "choices": [],
        }
        if step.delta is not None:
            chunk["choices"] = [
                {
                    "index": 0,
                    "delta": step.delta,
                    "logprobs": None,
                    "finish_reason": step.finish_reason,
                }
            ]
        if step.usage is not None:
            chunk["usage"] = step.usage
        return chunk

    def __enter__(self) -> FakeOpenAI:
        config = uvicorn.Config(
            self.app(),
            host="127.0.0.1",
            port=self._port,
            log_level="critical",
            lifespan="off",
            timeout_graceful_shutdown=1,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the fake OpenAI server did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._server is not None and self._thread is not None
        self._server.should_exit = True
        self._thread.join(timeout=10)


def main() -> None:
    parser = argparse.ArgumentParser(description="an echoing OpenAI-compatible fake")
    parser.add_argument("--port", type=int, default=8011)
    port = parser.parse_args().port
    with FakeOpenAI(port=port) as fake:
        print(f"serving {fake.base_url}", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()


if __name__ == "__main__":
    main()
