"""The live view of a session's stream, shared by ``run`` and ``attach``.

Thinking is shown dimmed, text as it streams, tool calls and their outputs as
panels. :func:`follow` drives a stream to its end: it renders (or prints
JSONL), puts approval requests to the user when asked to, and always leaves
the terminal at the start of a line, so an error printed after it never lands
mid-sentence.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator, Callable
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.text import Text

from omni_grpc.cli.ids import with_id
from omni_grpc.client import AgentClient, StreamEvent
from omni_grpc.convert import message_to_dict, server_event_to_dict
from omni_grpc.vocabulary import Decision, EventType, StopReason


class Output(Console):
    """stdout. Rich's own answer to a closed pipe is SystemExit(1); raising
    BrokenPipeError instead lets the command end its call and exit 141."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError


class Renderer:
    """Turns messages into terminal output and tracks the outcome."""

    def __init__(self, console: Console, attempts: Callable[[], int | None] = lambda: None) -> None:
        self.console = console
        # The engine's attempts per request, when the server said (an "of N").
        self._attempts = attempts
        # Kinds whose complete message was already shown through its partials.
        self._streamed: set[str] = set()
        # True while a streamed fragment has printed part of a line.
        self._mid_line = False
        self.failed = False
        # The resync_required events seen: the server dropped events this
        # reader had not read yet (it fell behind), so the output has a gap.
        self.gaps: list[str] = []

    def show(self, event: StreamEvent) -> None:
        if event.message is not None:
            self.show_message(message_to_dict(event.message))

    def show_message(self, msg: dict[str, Any]) -> None:
        payload: dict[str, Any] = msg.get("payload", {})
        kind = str(payload.get("type", "session_meta"))
        handler = getattr(self, f"_on_{kind}", None)
        if handler is not None and not msg.get("origin"):
            handler(payload)

    def end_line(self) -> None:
        """Finishes a line a fragment left open (before an error or on exit)."""
        if self._mid_line:
            self._mid_line = False
            with contextlib.suppress(BrokenPipeError):
                self.console.print()

    def _line(self, *renderables: Any) -> None:
        self.end_line()
        self.console.print(*renderables)

    def _on_partial_thinking(self, p: dict[str, Any]) -> None:
        self._partial(p, "thinking", "thinking", "dim italic")

    def _on_partial_text(self, p: dict[str, Any]) -> None:
        self._partial(p, "text", "text", "")

    def _partial(self, p: dict[str, Any], field: str, kind: str, style: str) -> None:
        if p.get("event_type") == EventType.STOP:
            self.console.print()
            self._mid_line = False
            self._streamed.add(kind)
        elif p.get(field):
            self._mid_line = True
            self.console.print(Text(p[field], style=style), end="")

    def _on_thinking(self, p: dict[str, Any]) -> None:
        if not self._take_streamed("thinking"):
            self._line(Text(p.get("thinking", ""), style="dim italic"))

    def _on_text(self, p: dict[str, Any]) -> None:
        if p.get("role") == "user":
            return  # our own input, echoed by the server at task start
        if not self._take_streamed("text"):
            self._line(Text(p.get("text", "")))

    def _take_streamed(self, kind: str) -> bool:
        if kind in self._streamed:
            self._streamed.discard(kind)
            return True
        return False

    def _on_tool_call(self, p: dict[str, Any]) -> None:
        arguments = p.get("arguments", "")
        with contextlib.suppress(ValueError):
            arguments = json.dumps(json.loads(arguments), indent=2, ensure_ascii=False)
        title = escape(f"tool call {p.get('name', '')} [{p.get('tool_call_id', '')}]")
        self._line(Panel(Text(arguments), title=title, border_style="cyan"))

    def _on_tool_call_output(self, p: dict[str, Any]) -> None:
        status = p.get("stop_reason", StopReason.COMPLETED)
        style = "green" if status == StopReason.COMPLETED else "red"
        title = escape(f"output [{p.get('tool_call_id', '')}]") + (
            "" if status == StopReason.COMPLETED else f" {status}"
        )
        self._line(Panel(Text(p.get("output", "")), title=title, border_style=style))

    def _on_approval_decision(self, p: dict[str, Any]) -> None:
        decision = p.get("decision", "")
        style = "green" if decision == Decision.ALLOW else "red"
        self._line(Text(f"approval: {decision} [{p.get('tool_call_id', '')}]", style=style))

    def _on_token_usage(self, p: dict[str, Any]) -> None:
        request, session = p.get("request", {}), p.get("session", {})
        line = f"tokens: {request.get('total', 0)} this request, {session.get('total', 0)} session"
        self._line(Text(line, style="dim"))

    def _on_request_end(self, p: dict[str, Any]) -> None:
        if p.get("status") not in (StopReason.COMPLETED, StopReason.ABORTED):
            detail = p.get("error_message") or p.get("status")
            line = f"request failed: {detail}"
            if "retry_in_ms" in p:
                # The engine tries again: say when, and which attempt comes next.
                wait = int(p["retry_in_ms"]) / 1000
                of = self._attempts()
                attempt = int(p.get("attempt", 0)) + 1
                line += f"; retrying in {wait:g} s, attempt {attempt}{f'/{of}' if of else ''}"
            self._line(Text(line, style="yellow" if "retry_in_ms" in p else "red"))

    def _on_abort(self, p: dict[str, Any]) -> None:
        self.failed = True
        self._line(Text(f"aborted: {p.get('reason') or 'no reason given'}", style="bold red"))


class HistoryRenderer(Renderer):
    """The live view's rendering, plus the user's own turns (a live run
    leaves them out because the user has just typed them): ``history``."""

    def _on_text(self, p: dict[str, Any]) -> None:
        if p.get("role") == "user":
            self.console.print(Text(f"> {p.get('text', '')}", style="bold"))
        else:
            super()._on_text(p)


# A resync_required in a stream that was being read live: the server let this
# reader go for falling behind (a slow stdout) and dropped what it had not read.
GAP = "this reader fell behind and the server dropped events it had not read yet"


def fell_behind(prog: str, event: StreamEvent) -> str:
    return f"{prog}: {GAP} (resync_required at {event.event_id or '?'})"


def incomplete(prog: str, session_id: str | None) -> str:
    return (
        f"{prog}: the output is incomplete: {GAP}; "
        f"`omni-grpc history {session_id} --json` has every recorded message"
    )


_YES, _NO = ("y", "yes"), ("n", "no")


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


async def read_terminal_line(fd: int) -> str | None:
    """One line typed on the terminal ``fd``; None at end of input.

    Read on the event loop, not in a thread: a thread blocked in ``input()``
    is waited for by ``asyncio.run`` on Ctrl-C, so the user would have to
    press Enter before the command could exit.
    """
    loop = asyncio.get_running_loop()
    chunks: list[bytes] = []
    while True:
        ready: asyncio.Future[None] = loop.create_future()
        loop.add_reader(fd, _settle, ready)
        try:
            await ready
        finally:
            loop.remove_reader(fd)
        chunk = os.read(fd, 4096)
        if not chunk:
            return b"".join(chunks).decode(errors="replace") if chunks else None
        chunks.append(chunk)
        if chunk.endswith(b"\n"):
            return b"".join(chunks).decode(errors="replace")


async def ask_user(console: Console, event: StreamEvent) -> Decision:
    """Shows the pending tool call and asks allow or deny; Ctrl-D denies."""
    assert event.server_event is not None
    request = server_event_to_dict(event.server_event)
    call = request.get("toolCall", {}).get("payload", {})
    console.print(
        Panel(
            Text(str(call.get("arguments", ""))),
            title=escape(f"approve {call.get('name', '')} [{call.get('tool_call_id', '')}]?"),
            border_style="yellow",
        )
    )
    while True:
        console.print(Text("Allow this tool call? [y/n]: ", style="bold"), end="")
        sys.stderr.flush()
        try:
            answer = await read_terminal_line(sys.stdin.fileno())
        except asyncio.CancelledError:
            console.print()  # Ctrl-C: what is printed next starts its own line
            raise
        if answer is None:
            console.print()
            return Decision.DENY
        word = answer.strip().lower()
        if word in _YES:
            return Decision.ALLOW
        if word in _NO:
            return Decision.DENY
        console.print(Text("Please answer y or n.", style="yellow"))


def tool_call_id(event: StreamEvent) -> str:
    assert event.server_event is not None
    return str(event.server_event.approval_request.tool_call.tool_call.tool_call_id)


async def follow(
    client: AgentClient,
    events: AsyncIterator[StreamEvent],
    renderer: Renderer,
    err: Console,
    *,
    as_json: bool,
    ask: bool,
    ends_at: Callable[[StreamEvent], bool] | None = lambda event: event.is_task_end,
    on_approval: Callable[[StreamEvent], None] | None = None,
    on_gap: Callable[[StreamEvent], None] | None = None,
    ids: bool = False,
) -> None:
    """Renders ``events`` (JSONL with ``as_json``; with ``ids`` too, each line
    wrapped as ``{"id": EVENT_ID, "message": MESSAGE}``) up to the first event
    ``ends_at`` accepts (by default the ``task_state idle`` closing the task).

    A pending approval is put to the user when ``ask`` is set, else handed to
    ``on_approval`` (which may print how to answer it). A ``resync_required``
    (the server let this reader go for falling behind, e.g. a slow stdout,
    and dropped what it had not read) is kept in ``renderer.gaps`` and handed
    to ``on_gap``: the command must not end as if nothing was missed.
    """
    try:
        async for event in events:
            if as_json:
                if event.message is not None:
                    sys.stdout.buffer.write(with_id(event) if ids else event.to_json() + b"\n")
                    sys.stdout.buffer.flush()
                    if event.kind == "abort":
                        renderer.failed = True
            else:
                renderer.show(event)
            if event.kind == "@resync_required":
                renderer.end_line()
                renderer.gaps.append(event.event_id)
                if on_gap is not None:
                    on_gap(event)
            if event.kind == "@approval_request":
                renderer.end_line()
                if ask:
                    decision = await ask_user(err, event)
                    await client.approve(event.session_id, tool_call_id(event), decision)
                elif on_approval is not None:
                    on_approval(event)
            if ends_at is not None and ends_at(event):
                break
    finally:
        renderer.end_line()
