"""``omni-grpc chat``: one session, turn after turn, on the terminal.

Each line typed is a run in the same session, rendered as ``run`` renders
it; tool calls are asked about inline with ``--approve ask`` (the default on
a terminal). ``--continue`` picks up the most recently active session,
``--session SID`` a given one. Ctrl-D (or ``/exit``) ends the chat; Ctrl-C
aborts the turn and ends it. Off a terminal, stdin's lines are the turns.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from rich.console import Console
from rich.text import Text

from omni_grpc.cli.connection import add_connection_options
from omni_grpc.cli.exits import (
    EXIT_OK,
    EXIT_RUN_FAILED,
    EXIT_USAGE,
    client_command,
    describe_error,
    exit_codes,
    say,
)
from omni_grpc.cli.pipes import stdout_gone
from omni_grpc.cli.render import Output, Renderer, fell_behind, follow, read_terminal_line
from omni_grpc.client import AgentClient, AgentError, RunStream, StreamEvent
from omni_grpc.vocabulary import ApprovalMode, Decision

PROG = "omni-grpc chat"
QUIT = ("/exit", "/quit")
# Said once at the start on a terminal: a chat's way out is not obvious.
LEAVING = "Ctrl-D or /exit leaves the chat; Ctrl-C stops a running turn and leaves"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "chat",
        help="an interactive session, turn after turn",
        description="Talk to the agent in one session, turn after turn: each line is a "
        "run, rendered live, with approvals asked inline. Ctrl-D or /exit ends the chat; "
        "Ctrl-C aborts the running turn and ends it. Off a terminal, each line of stdin "
        "is a turn (approvals then follow --approve, default the server's mode).",
        epilog=exit_codes(
            failed="the last turn was aborted or failed",
            interrupted="the running turn is aborted",
            usage="bad usage (arguments, --approve ask without a terminal, "
            "--continue with no session)",
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--session", help="continue this session (default: a new one)")
    which.add_argument(
        "--continue",
        dest="resume",
        action="store_true",
        help="continue the most recently active session",
    )
    parser.add_argument(
        "--approve",
        choices=[str(w) for w in (*ApprovalMode, Decision.ALLOW, Decision.DENY)],
        metavar="{allow-all,deny-all,read-only,ask}",
        help="approval mode for tool calls (default: ask on a terminal, else the server's)",
    )
    add_connection_options(parser)
    parser.set_defaults(handler=chat_command)


async def _next_prompt(err: Console, interactive: bool) -> str | None:
    """The next turn's text; None at the end of input or on /exit."""
    while True:
        if interactive:
            err.print(Text("you> ", style="bold green"), end="")
            sys.stderr.flush()
            line = await read_terminal_line(sys.stdin.fileno())
        else:
            line = sys.stdin.readline() or None
        if line is None:
            if interactive:
                err.print()
            return None
        text = line.strip()
        if text in QUIT:
            return None
        if text:
            return text


async def chat(args: argparse.Namespace, client: AgentClient, err: Console) -> int:
    interactive = sys.stdin.isatty()
    short = {Decision.ALLOW: ApprovalMode.ALLOW_ALL, Decision.DENY: ApprovalMode.DENY_ALL}
    mode = short.get(args.approve, args.approve) or (ApprovalMode.ASK if interactive else None)
    session_id: str | None = args.session
    if args.resume:
        sessions = await client.list_sessions()
        if not sessions:
            say(f"{PROG}: --continue: the server has no session to continue")
            return EXIT_USAGE
        session_id = max(sessions, key=lambda s: (s.updated_at, s.session_id)).session_id
    if session_id:
        say(f"session {session_id}", "dim")
    if interactive:
        say(LEAVING, "dim")
    code = EXIT_OK
    while (prompt := await _next_prompt(err, interactive)) is not None:
        stream = client.run(prompt, session_id=session_id, approval_mode=mode)
        renderer = Renderer(Output(highlight=False), attempts=_attempts_of(stream))

        def on_gap(event: StreamEvent) -> None:
            say(fell_behind(PROG, event))

        try:
            await follow(client, aiter(stream), renderer, err, as_json=False,
                         ask=mode == ApprovalMode.ASK, ends_at=None, on_gap=on_gap)  # fmt: skip
        except BrokenPipeError:
            stream.cancel()
            return stdout_gone()
        except AgentError as exc:
            if not stream.task_ended:
                raise  # refused, or the connection lost
            say(f"{PROG}: the turn failed: {describe_error(exc)}")
            renderer.failed = True
        if session_id is None and stream.session_id:
            session_id = stream.session_id
            say(f"session {session_id}", "dim")
        code = EXIT_RUN_FAILED if renderer.failed or renderer.gaps else EXIT_OK
    return code


def chat_command(args: argparse.Namespace) -> int:
    if args.approve == ApprovalMode.ASK and not sys.stdin.isatty():
        say(f"{PROG}: --approve ask needs a terminal to ask on")
        return EXIT_USAGE
    return client_command(
        PROG,
        args,
        lambda client: chat(args, client, Console(stderr=True)),
        interrupted="interrupted: the running turn was aborted",
    )


def _attempts_of(stream: RunStream) -> Callable[[], int | None]:
    """The stream's engine attempts, read when a retry is shown (known once
    the first event arrived)."""
    return lambda: stream.max_attempts
