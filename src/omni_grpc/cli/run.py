"""``omni-grpc run PROMPT``: call an agent over gRPC and render its stream live.

With ``--approve ask`` each tool call is put to the user on the terminal.
``--json`` prints the OmniMessages as JSONL instead (the reference bytes, via
the codec). ``--detach`` starts the task, prints its session id and leaves it
running for ``attach``. Exit statuses: see ``EXIT_CODES``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import AsyncIterator

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
from omni_grpc.cli.ids import IDS_HELP
from omni_grpc.cli.pipes import stdout_gone
from omni_grpc.client import AgentClient, AgentError, StreamEvent
from omni_grpc.vocabulary import ApprovalMode, Decision, ThinkingLevel

PROG = "omni-grpc run"
EXIT_CODES = exit_codes(
    failed="the run was aborted or failed (the stream ended with abort, or the "
    "server ended it with an error, e.g. its trace could not be written), or "
    "the output has a gap: this reader fell behind (a slow stdout) and the server "
    "dropped events it had not read (resync_required)",
    interrupted="the run is aborted",
    usage="bad usage (arguments, --approve ask without a terminal)",
)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "run",
        help="send a prompt to an AgentService and render the stream",
        description="Send PROMPT to an omni-grpc server and render the agent's stream live.",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "prompt",
        nargs="?",
        help="the user message; - (or none, with stdin not a terminal) reads it from stdin",
    )
    add_connection_options(parser)
    parser.add_argument("--session", help="continue this session (default: a new one)")
    parser.add_argument(
        "--approve",
        # The words of serve --approval-mode and SSE approvalMode, plus short aliases.
        choices=[str(w) for w in (*ApprovalMode, Decision.ALLOW, Decision.DENY)],
        metavar="{allow-all,deny-all,read-only,ask}",
        help="approval mode for tool calls (default: the server's); "
        "allow and deny are short for allow-all and deny-all",
    )
    parser.add_argument("--thinking", choices=[str(t) for t in ThinkingLevel], help="level")
    parser.add_argument("--json", action="store_true", help="print OmniMessages as JSONL")
    parser.add_argument("--ids", action="store_true", help=IDS_HELP)
    parser.add_argument(
        "--detach",
        action="store_true",
        help="start the task, print its session id (with --json: as a JSON object) and "
        "exit, leaving it running (follow it with `omni-grpc attach`)",
    )
    parser.set_defaults(handler=run_command)


async def run_stream(args: argparse.Namespace, client: AgentClient) -> int:
    short = {Decision.ALLOW: ApprovalMode.ALLOW_ALL, Decision.DENY: ApprovalMode.DENY_ALL}
    approval_mode = short.get(args.approve, args.approve)
    stream = client.run(
        args.prompt,
        session_id=args.session,
        approval_mode=approval_mode,
        thinking_level=args.thinking,
        detach_on_cancel=args.detach,
    )
    if args.detach:
        session_id = await stream.session()
        stream.cancel()  # detach_on_cancel: the task goes on without us
        # --json: one object, the keys of `sessions --json`, for a script to read.
        text = json.dumps({"session_id": session_id}) if args.json or args.ids else session_id
        print(text, flush=True)
        return EXIT_OK
    # The terminal renderer and the codec are loaded only now, with the call
    # on its way: --detach (and a refused call) never pay for them.
    from rich.console import Console

    from omni_grpc.cli.render import Output, Renderer, fell_behind, follow, incomplete

    err = Console(stderr=True)
    renderer = Renderer(Output(highlight=False), attempts=lambda: stream.max_attempts)

    def on_gap(event: StreamEvent) -> None:
        say(fell_behind(PROG, event))

    last = ""

    async def events() -> AsyncIterator[StreamEvent]:
        nonlocal last
        async for event in stream:
            last = event.event_id or last
            yield event

    try:
        # Read to the end of the call, not to the task end: a run the server
        # had to stop closes with task_state idle too, and only the status
        # after it says so.
        await follow(client, events(), renderer, err, as_json=args.json or args.ids,
                     ids=args.ids,
                     ask=args.approve == ApprovalMode.ASK, ends_at=None,
                     on_gap=on_gap)  # fmt: skip
    except BrokenPipeError:
        # Nobody reads the output any more: end the call, which aborts the run.
        stream.cancel()
        return stdout_gone()
    except AgentError as exc:
        if not stream.task_ended:
            raise  # refused, or the connection lost: the call failed (exit 3)
        if renderer.gaps:
            # The server ends a call that missed events with ABORTED: what is
            # wrong is this output, which the line below says.
            say(f"session {stream.session_id}", "dim")
            say(incomplete(PROG, stream.session_id))
            return EXIT_RUN_FAILED
        say(f"{PROG}: the run failed: {describe_error(exc)}")
        say(f"session {stream.session_id}", "dim")
        return EXIT_RUN_FAILED
    if stream.session_id:
        say(f"session {stream.session_id}", "dim")
    if last:
        # What `attach --after` resumes from (--ids gives every event's).
        say(f"last event {last}", "dim")
    if renderer.gaps:
        # Said again at the end, where a script's log shows it last.
        say(incomplete(PROG, stream.session_id))
        return EXIT_RUN_FAILED
    return EXIT_RUN_FAILED if renderer.failed else EXIT_OK


def run_command(args: argparse.Namespace) -> int:
    if args.prompt is None:
        if sys.stdin.isatty():
            say(f"{PROG}: give the PROMPT, or pipe it in: echo hi | omni-grpc run")
            return EXIT_USAGE
        args.prompt = "-"  # `... | omni-grpc run`: the pipe is the prompt
    if args.prompt == "-":
        if args.approve == ApprovalMode.ASK and not args.detach:
            say(f"{PROG}: --approve ask reads its answers from stdin, not the prompt")
            return EXIT_USAGE
        args.prompt = sys.stdin.read().removesuffix("\n")
        if not args.prompt.strip():
            say(f"{PROG}: the prompt read from stdin is empty")
            return EXIT_USAGE
    # Detached, nobody asks here: `omni-grpc approve` answers later.
    if args.approve == ApprovalMode.ASK and not args.detach and not sys.stdin.isatty():
        say(f"{PROG}: --approve ask needs a terminal to ask on")
        return EXIT_USAGE
    return client_command(
        PROG,
        args,
        lambda client: run_stream(args, client),
        interrupted="interrupted: the run was aborted",
    )
