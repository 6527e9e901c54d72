"""``omni-grpc run PROMPT``: call an agent over gRPC and render its stream live.

Thinking is shown dimmed, text as it streams, tool calls and their outputs as
panels; with ``--approve ask`` each tool call is put to the user on the
terminal. ``--json`` prints the OmniMessages as JSONL instead (the reference
bytes, via the codec). Exit statuses: see ``EXIT_CODES``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.prompt import Confirm
from rich.text import Text

from omni_grpc.cli.pipes import EXIT_BROKEN_PIPE, stdout_gone
from omni_grpc.cli.target import DEFAULT_PORT, with_default_port
from omni_grpc.client import AgentClient, AgentError, StreamEvent
from omni_grpc.convert import message_to_dict, server_event_to_dict
from omni_grpc.vocabulary import ApprovalMode, Decision, StopReason, ThinkingLevel

EXIT_OK, EXIT_RUN_FAILED, EXIT_USAGE, EXIT_RPC, EXIT_INTERRUPTED = 0, 1, 2, 3, 130
EXIT_CODES = f"""exit status:
  {EXIT_OK}    the run completed
  {EXIT_RUN_FAILED}    the run was aborted or failed (the stream ended with abort)
  {EXIT_USAGE}    bad usage (arguments, --approve ask without a terminal)
  {EXIT_RPC}    the call itself failed (connection, auth, a refused request)
  {EXIT_INTERRUPTED}  interrupted by Ctrl-C (the run is aborted)
  {EXIT_BROKEN_PIPE}  stdout was closed, e.g. by `| head` (the run is aborted)"""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "run",
        help="send a prompt to an AgentService and render the stream",
        description="Send PROMPT to an omni-grpc server and render the agent's stream live.",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("prompt", help="the user message")
    parser.add_argument(
        "--target",
        default=f"127.0.0.1:{DEFAULT_PORT}",
        help=f"HOST[:PORT] of the server; the port defaults to {DEFAULT_PORT} "
        "(default %(default)s)",
    )
    parser.add_argument("--session", help="continue this session (default: a new one)")
    parser.add_argument(
        "--approve",
        # The words of serve --approval-mode and SSE approvalMode, plus short aliases.
        choices=[*ApprovalMode, Decision.ALLOW, Decision.DENY],
        metavar="{allow-all,deny-all,read-only,ask}",
        help="approval mode for tool calls (default: the server's); "
        "allow and deny are short for allow-all and deny-all",
    )
    parser.add_argument("--thinking", choices=list(ThinkingLevel), help="level")
    parser.add_argument("--json", action="store_true", help="print OmniMessages as JSONL")
    parser.add_argument(
        "--token",
        default=os.environ.get("OMNI_AUTH_TOKEN"),
        help="bearer token (default $OMNI_AUTH_TOKEN)",
    )
    parser.add_argument("--tls", action="store_true", help="use TLS with the system roots")
    parser.add_argument("--tls-ca", type=Path, help="PEM CA to verify the server (implies TLS)")
    parser.add_argument("--tls-cert", type=Path, help="client certificate for mTLS")
    parser.add_argument("--tls-key", type=Path, help="client key for mTLS")
    parser.set_defaults(handler=run_command)


class _Output(Console):
    """stdout. Rich's own answer to a closed pipe is SystemExit(1); raising
    BrokenPipeError instead lets the run end the call and exit like --json."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError


class Renderer:
    """Turns stream events into terminal output. Returns nothing; tracks the outcome."""

    def __init__(self, console: Console) -> None:
        self.console = console
        # Kinds whose complete message was already shown through its partials.
        self._streamed: set[str] = set()
        self.failed = False

    def show(self, event: StreamEvent) -> None:
        if event.message is None:
            return
        msg = message_to_dict(event.message)
        payload: dict[str, Any] = msg.get("payload", {})
        kind = str(payload.get("type", "session_meta"))
        handler = getattr(self, f"_on_{kind}", None)
        if handler is not None and not msg.get("origin"):
            handler(payload)

    def _on_partial_thinking(self, p: dict[str, Any]) -> None:
        self._partial(p, "thinking", "thinking", "dim italic")

    def _on_partial_text(self, p: dict[str, Any]) -> None:
        self._partial(p, "text", "text", "")

    def _partial(self, p: dict[str, Any], field: str, kind: str, style: str) -> None:
        if p.get("event_type") == "stop":
            self.console.print()
            self._streamed.add(kind)
        elif p.get(field):
            self.console.print(Text(p[field], style=style), end="")

    def _on_thinking(self, p: dict[str, Any]) -> None:
        if not self._take_streamed("thinking"):
            self.console.print(Text(p.get("thinking", ""), style="dim italic"))

    def _on_text(self, p: dict[str, Any]) -> None:
        if p.get("role") == "user":
            return  # our own input, echoed by the server at task start
        if not self._take_streamed("text"):
            self.console.print(Text(p.get("text", "")))

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
        self.console.print(Panel(Text(arguments), title=title, border_style="cyan"))

    def _on_tool_call_output(self, p: dict[str, Any]) -> None:
        status = p.get("stop_reason", StopReason.COMPLETED)
        style = "green" if status == StopReason.COMPLETED else "red"
        title = escape(f"output [{p.get('tool_call_id', '')}]") + (
            "" if status == StopReason.COMPLETED else f" {status}"
        )
        self.console.print(Panel(Text(p.get("output", "")), title=title, border_style=style))

    def _on_approval_decision(self, p: dict[str, Any]) -> None:
        decision = p.get("decision", "")
        style = "green" if decision == Decision.ALLOW else "red"
        self.console.print(Text(f"approval: {decision} [{p.get('tool_call_id', '')}]", style=style))

    def _on_token_usage(self, p: dict[str, Any]) -> None:
        request, session = p.get("request", {}), p.get("session", {})
        line = f"tokens: {request.get('total', 0)} this request, {session.get('total', 0)} session"
        self.console.print(Text(line, style="dim"))

    def _on_request_end(self, p: dict[str, Any]) -> None:
        if p.get("status") not in (StopReason.COMPLETED, StopReason.ABORTED):
            detail = p.get("error_message") or p.get("status")
            self.console.print(Text(f"request failed: {detail}", style="red"))

    def _on_abort(self, p: dict[str, Any]) -> None:
        self.failed = True
        self.console.print(
            Text(f"aborted: {p.get('reason') or 'no reason given'}", style="bold red")
        )


async def ask_user(console: Console, event: StreamEvent) -> str:
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
    allowed = await asyncio.to_thread(Confirm.ask, "Allow this tool call?", console=console)
    return Decision.ALLOW if allowed else Decision.DENY


def _tool_call_id(event: StreamEvent) -> str:
    assert event.server_event is not None
    return str(event.server_event.approval_request.tool_call.tool_call.tool_call_id)


async def run_stream(args: argparse.Namespace, out: Console, err: Console) -> int:
    client = AgentClient(
        with_default_port(args.target),
        token=args.token or None,
        tls=args.tls,
        tls_ca=args.tls_ca,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
    )
    renderer = Renderer(out)
    short = {Decision.ALLOW: ApprovalMode.ALLOW_ALL, Decision.DENY: ApprovalMode.DENY_ALL}
    approval_mode = short.get(args.approve, args.approve)
    try:
        stream = client.run(
            args.prompt,
            session_id=args.session,
            approval_mode=approval_mode,
            thinking_level=args.thinking,
        )
        try:
            async for event in stream:
                if args.json:
                    if event.message is not None:
                        sys.stdout.buffer.write(event.to_json() + b"\n")
                        sys.stdout.buffer.flush()
                        if event.kind == "abort":
                            renderer.failed = True
                else:
                    renderer.show(event)
                if event.kind == "@approval_request":
                    decision = await ask_user(err, event)
                    await client.approve(event.session_id, _tool_call_id(event), decision)
                if event.is_task_end:
                    break
        except BrokenPipeError:
            # Nobody reads the output any more: end the call, which aborts the run.
            stream.cancel()
            return stdout_gone()
        if stream.session_id:
            say(err, f"session {stream.session_id}", "dim")
    except AgentError as exc:
        say(err, f"omni-grpc run: {describe_error(exc)}")
        return EXIT_RPC
    finally:
        await client.close()
    return EXIT_RUN_FAILED if renderer.failed else EXIT_OK


def say(err: Console, text: str, style: str = "red") -> None:
    """One stderr line, whole: rich would soft-wrap it at 80 columns off a
    terminal, and read brackets in it (an IPv6 address) as markup."""
    err.print(Text(text, style=style), soft_wrap=True)


def describe_error(exc: AgentError) -> str:
    """The status line, plus the field violations it does not already say."""
    text = str(exc)
    extra = [f"{f}: {d}" for f, d in exc.field_violations if f"{f}: {d}" not in text]
    return text + (f" ({'; '.join(extra)})" if extra else "")


def run_command(args: argparse.Namespace) -> int:
    err = Console(stderr=True)
    if args.approve == ApprovalMode.ASK and not sys.stdin.isatty():
        say(err, "omni-grpc run: --approve ask needs a terminal to ask on")
        return EXIT_USAGE
    if (args.tls_cert is None) != (args.tls_key is None):
        say(err, "omni-grpc run: --tls-cert and --tls-key go together")
        return EXIT_USAGE
    out = _Output(highlight=False)
    try:
        return asyncio.run(run_stream(args, out, err))
    except KeyboardInterrupt:
        say(err, "interrupted: the run was aborted")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return stdout_gone()
    except OSError as exc:
        say(err, f"omni-grpc run: {exc}")
        return EXIT_USAGE
