"""The ``openai`` engine: an agent loop over any OpenAI-compatible chat endpoint.

Each run rebuilds the conversation from the session's trace, then loops: one
streamed model request, its tool calls approved one at a time as each
completes, approved calls run concurrently, and the next request once every
output is in. Failures follow the reference retry ladder (``timeout``,
``malformed`` and ``failed`` retried up to five attempts with exponential
backoff, or after the wait the endpoint's Retry-After asks for, capped;
``auth`` stops at once).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import httpx

from omni_grpc import propagation
from omni_grpc.engines.asking import ask
from omni_grpc.engines.base import AbortSignal, ApprovalUnanswered, RunOptions
from omni_grpc.engines.openai.config import REASONING_EFFORT, OpenAIConfig
from omni_grpc.engines.openai.history import (
    drop_echoed_input,
    rebuild,
    to_chat_messages,
)
from omni_grpc.engines.openai.stream import MalformedStream, TurnAssembler
from omni_grpc.engines.openai.transport import (
    StreamChunk,
    StreamEnd,
    StreamEvent,
    StreamFailure,
    stream_completion,
)
from omni_grpc.engines.tools import ToolContext, ToolResult, run_tool
from omni_grpc.protocol import builders as b
from omni_grpc.vocabulary import USER_ABORT_REASON, Decision, StopReason

JsonObject = dict[str, Any]

# Waits the seconds given, or less when the run is aborted: True then.
Pause = Callable[[float, AbortSignal], Awaitable[bool]]

RETRIED_INTERRUPT = "[interrupted: the model request was retried]"


class OpenAIEngine:
    # Each run rebuilds its conversation from the trace: a resumed run goes on
    # from what was committed, with the placeholders the interruption wrote.
    resumable = True
    name = "openai"

    def __init__(
        self,
        config: OpenAIConfig,
        *,
        client: httpx.AsyncClient | None = None,
        pause: Pause | None = None,
    ) -> None:
        self.config = config
        self._client = client
        # The wait between attempts; a test passes its own to see a
        # Retry-After of minutes obeyed without spending them.
        self.pause: Pause = pause or sleep_or_abort

    @property
    def max_attempts(self) -> int:
        """Attempts per model request, the first included (``RetriesRequests``)."""
        return self.config.max_attempts

    def session_meta(self, session_id: str, workspace: Path) -> JsonObject:
        return b.session_meta_payload(
            session_id,
            self.config.provider,
            self.config.model,
            self.config.context_window,
            self.config.system_prompt,
            self.config.agent_state,
            str(workspace),
        )

    def is_read_only_tool(self, tool_name: str) -> bool:
        tool = self.config.tools.get(tool_name)
        return tool is not None and tool.read_only

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    def http_client(self) -> httpx.AsyncClient:
        if self._client is None:
            timeout = httpx.Timeout(self.config.read_timeout, connect=self.config.connect_timeout)
            self._client = httpx.AsyncClient(timeout=timeout)
        return self._client

    async def run(self, input: list[JsonObject], options: RunOptions) -> AsyncIterator[JsonObject]:
        run = _Run(self, options)
        async for message in run.execute(input):
            yield message


class _Run:
    """One run's state: the conversation, token totals and the tools in flight."""

    def __init__(self, engine: OpenAIEngine, options: RunOptions) -> None:
        self.engine = engine
        self.config = engine.config
        self.options = options
        self.items: list[JsonObject] = []
        self.call_ids: set[str] = set()
        self.session_usage: JsonObject = b.empty_token_counts()
        self.tools: dict[str, asyncio.Task[ToolResult]] = {}
        self.ctx = ToolContext(options.session_id, options.workspace)

    async def execute(self, run_input: list[JsonObject]) -> AsyncIterator[JsonObject]:
        yield b.tool_list_ready([t.definition() for t in self.config.tools.values()])
        trace = self.options.trace
        recorded = trace.messages() if trace is not None else []
        self.call_ids = {
            str(m["payload"].get("tool_call_id"))
            for m in recorded
            if isinstance(m.get("payload"), dict) and m["payload"].get("type") == "tool_call"
        }
        history = rebuild(recorded)
        drop_echoed_input(history, run_input)
        self.items = history.items + [dict(m["payload"]) for m in run_input]
        self.session_usage = history.session_usage
        try:
            for _ in range(self.config.max_turns):
                outcome = _Outcome()
                async for message in self._request_with_retries(outcome):
                    yield message
                if outcome.abort_reason is not None:
                    yield b.abort_event(outcome.abort_reason)
                    return
                if not outcome.calls:
                    return
            yield b.abort_event(f"turn limit reached ({self.config.max_turns} model requests)")
        finally:
            await self._cancel_tools()

    # ---- one model request, retried --------------------------------------------

    async def _request_with_retries(self, outcome: _Outcome) -> AsyncIterator[JsonObject]:
        for attempt in range(1, self.config.max_attempts + 1):
            yield b.request_begin()
            failure: StreamFailure | None = None
            async for message in self._attempt(attempt, outcome):
                if isinstance(message, StreamFailure):
                    failure = message
                else:
                    yield message
            if outcome.abort_reason is not None or failure is None:
                return
            last = attempt == self.config.max_attempts
            if failure.status == StopReason.AUTH or not failure.retryable or last:
                yield b.request_end(failure.status, error_message=failure.message, attempt=attempt)
                outcome.abort_reason = f"llm request error: {failure.message}"
                return
            delay, why = self.config.retry_wait(attempt, failure.retry_after)
            yield b.request_end(
                failure.status,
                error_message=failure.message + why,
                attempt=attempt,
                retry_in_ms=delay,
            )
            if await self.engine.pause(delay / 1000, self.options.abort):
                outcome.abort_reason = self._abort_reason()
                return

    async def _attempt(
        self, attempt: int, outcome: _Outcome
    ) -> AsyncIterator[JsonObject | StreamFailure]:
        """Streams one request. Yields messages, or a trailing StreamFailure to retry."""
        queue: asyncio.Queue[StreamEvent | _ToolDone] = asyncio.Queue()
        producer = asyncio.create_task(
            stream_completion(
                self.engine.http_client(),
                self.config.chat_url,
                self._body(),
                self._headers(),
                queue.put_nowait,
            )
        )
        assembler = TurnAssembler(self.call_ids)
        started: list[str] = []
        try:
            while True:
                event = await _next_event(queue, self.options.abort)
                if event is None:  # aborted
                    producer.cancel()
                    for message in assembler.close(StopReason.ABORTED):
                        yield message
                    yield b.request_end(StopReason.ABORTED, attempt=attempt)
                    outcome.abort_reason = self._abort_reason()
                    return
                if isinstance(event, _ToolDone):
                    yield self._tool_output(event)
                    continue
                if isinstance(event, StreamChunk):
                    try:
                        produced = assembler.feed(event.data)
                    except MalformedStream as exc:
                        event = StreamFailure(StopReason.MALFORMED, str(exc), retryable=True)
                    else:
                        for message in produced:
                            yield message
                            if message["payload"]["type"] == "tool_call":
                                async for decided in self._approve(message, queue, started):
                                    yield decided
                        continue
                if isinstance(event, StreamEnd) and (
                    event.done_marker or assembler.finish_reason is not None
                ):
                    for message in assembler.close():
                        yield message
                        if message["payload"]["type"] == "tool_call":
                            async for decided in self._approve(message, queue, started):
                                yield decided
                    if self.options.abort.is_set():
                        continue  # the loop head turns it into the aborted ending
                    async for message in self._commit(assembler, attempt, outcome, queue):
                        yield message
                    return
                failure = event if isinstance(event, StreamFailure) else _truncated()
                producer.cancel()
                for message in assembler.close(failure.status):
                    yield message
                for message in await self._interrupt(started):
                    yield message
                yield failure
                return
        finally:
            producer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await producer

    async def _commit(
        self,
        assembler: TurnAssembler,
        attempt: int,
        outcome: _Outcome,
        queue: asyncio.Queue[StreamEvent | _ToolDone],
    ) -> AsyncIterator[JsonObject]:
        """token_usage and request_end, then the outputs still running, in completion order."""
        if assembler.usage is not None:
            request = _token_counts(assembler.usage)
            self.session_usage = b.add_token_counts(self.session_usage, request)
            yield b.token_usage(self.session_usage, request)
        yield b.request_end(StopReason.COMPLETED, attempt=attempt if attempt > 1 else None)
        self.items += [dict(m["payload"]) for m in assembler.messages]
        outcome.calls = [c["payload"]["tool_call_id"] for c in assembler.tool_calls]
        while self.tools:
            event = await _next_event(queue, self.options.abort)
            if event is None:
                outcome.abort_reason = self._abort_reason()
                return
            if isinstance(event, _ToolDone):
                yield self._tool_output(event)

    # ---- approvals and tools ---------------------------------------------------------

    async def _approve(
        self,
        call: JsonObject,
        queue: asyncio.Queue[StreamEvent | _ToolDone],
        started: list[str],
    ) -> AsyncIterator[JsonObject]:
        payload = call["payload"]
        if payload["stop_reason"] != StopReason.COMPLETED or self.options.abort.is_set():
            return
        try:
            decision = await ask(self.options.approve, call, self.options.abort)
        except ApprovalUnanswered as why:
            # Nobody decided: no approval_decision, an output that says why
            # (after an abort the caller ends the run).
            unanswered = b.unanswered_tool_output(call, why.stop_reason, why.reason)
            self.items.append(dict(unanswered["payload"]))
            yield unanswered
            return
        call_id = payload["tool_call_id"]
        yield b.approval_decision(decision, call_id)
        if decision != Decision.ALLOW:
            denied = b.denied_tool_output(call, decision)
            self.items.append(dict(denied["payload"]))
            yield denied
            return
        tool = self.config.tools.get(payload["name"])
        task = asyncio.create_task(run_tool(tool, payload["name"], payload["arguments"], self.ctx))
        self.tools[call_id] = task
        started.append(call_id)
        task.add_done_callback(lambda t: queue.put_nowait(_ToolDone(call_id, t)))

    def _tool_output(self, done: _ToolDone) -> JsonObject:
        self.tools.pop(done.call_id, None)
        if done.task.cancelled():
            result = ToolResult(RETRIED_INTERRUPT, status=StopReason.ABORTED)
        else:
            result = done.task.result()
        message = b.tool_call_output(
            result.output, done.call_id, images=result.images, stop_reason=result.status
        )
        self.items.append(dict(message["payload"]))
        return message

    async def _interrupt(self, started: list[str]) -> list[JsonObject]:
        """Cancels this attempt's unfinished tools; each gets an aborted output."""
        out = []
        for call_id in started:
            task = self.tools.pop(call_id, None)
            if task is not None and not task.done():
                task.cancel()
                out.append(
                    b.tool_call_output(RETRIED_INTERRUPT, call_id, stop_reason=StopReason.ABORTED)
                )
        return out

    async def _cancel_tools(self) -> None:
        tasks = list(self.tools.values())
        self.tools.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # ---- the request ----------------------------------------------------------------

    def _body(self) -> JsonObject:
        body: JsonObject = {
            "model": self.config.model,
            "messages": to_chat_messages(
                self.items, self.config.system_prompt, replay_reasoning=self.config.replay_reasoning
            ),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if self.config.tools:
            body["tools"] = [
                {"type": "function", "function": t.definition()} for t in self.config.tools.values()
            ]
        effort = REASONING_EFFORT.get(self.options.thinking_level or "")
        if effort is not None:
            body["reasoning_effort"] = effort
        if self.config.temperature is not None:
            body["temperature"] = self.config.temperature
        if self.config.max_tokens is not None:
            body["max_tokens"] = self.config.max_tokens
        return body

    def _headers(self) -> dict[str, str]:
        headers = {"content-type": "application/json", "accept": "text/event-stream"}
        if self.config.api_key:
            headers["authorization"] = f"Bearer {self.config.api_key}"
        return propagation.inject(headers)  # traceparent: the model request's span

    def _abort_reason(self) -> str:
        return self.options.abort.reason or USER_ABORT_REASON


class _Outcome:
    def __init__(self) -> None:
        self.abort_reason: str | None = None
        self.calls: list[str] = []


class _ToolDone:
    __slots__ = ("call_id", "task")

    def __init__(self, call_id: str, task: asyncio.Task[ToolResult]) -> None:
        self.call_id = call_id
        self.task = task


def _truncated() -> StreamFailure:
    return StreamFailure(
        StopReason.MALFORMED, "the stream ended before a finish_reason", retryable=True
    )


def _token_counts(usage: Mapping[str, Any]) -> JsonObject:
    prompt = _int(usage.get("prompt_tokens"))
    output = _int(usage.get("completion_tokens"))
    details = usage.get("prompt_tokens_details")
    cached = _int(details.get("cached_tokens")) if isinstance(details, Mapping) else 0
    cached = min(cached, prompt)
    return {
        "cache_read": cached,
        "cache_write": prompt - cached,
        "output": output,
        "total": prompt + output,
    }


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


async def _next_event(
    queue: asyncio.Queue[StreamEvent | _ToolDone], abort: AbortSignal
) -> StreamEvent | _ToolDone | None:
    """The next queued event, or None once the run is aborted."""
    if abort.is_set():
        return None
    if not queue.empty():
        return queue.get_nowait()
    getter = asyncio.ensure_future(queue.get())
    waiter = asyncio.ensure_future(abort.wait())
    try:
        await asyncio.wait({getter, waiter}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
        if not getter.done():
            getter.cancel()
    if abort.is_set():
        return None  # whatever arrived meanwhile no longer matters: the run is ending
    return getter.result()


async def sleep_or_abort(seconds: float, abort: AbortSignal) -> bool:
    """Waits ``seconds``; True when the run was aborted meanwhile."""
    try:
        await asyncio.wait_for(abort.wait(), timeout=seconds)
    except TimeoutError:
        return False
    return True
