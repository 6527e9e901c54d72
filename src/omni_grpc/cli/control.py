"""``omni-grpc approve`` and ``omni-grpc abort``: answer or stop a session's
task from another shell (after ``run --detach``, or beside ``attach``)."""

from __future__ import annotations

import argparse

from omni_grpc.cli.connection import add_connection_options
from omni_grpc.cli.exits import EXIT_OK, EXIT_RUN_FAILED, client_command, exit_codes, say
from omni_grpc.client import AgentClient
from omni_grpc.vocabulary import Decision


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    approve = subparsers.add_parser(
        "approve",
        help="answer a pending approval request",
        description="Allow or deny the tool call CALL_ID a session's task waits on "
        "(approval mode ask).",
        epilog=exit_codes(interrupted="nothing was sent"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    approve.add_argument("session", metavar="SID", help="the session id")
    approve.add_argument("tool_call_id", metavar="CALL_ID", help="the tool call's id")
    decisions = [str(Decision.ALLOW), str(Decision.DENY)]
    approve.add_argument("decision", choices=decisions, help="the answer")
    add_connection_options(approve)
    approve.set_defaults(handler=approve_command)

    abort = subparsers.add_parser(
        "abort",
        help="stop a session's running task",
        description="Stop the task a session is running; its stream and trace end with the abort.",
        epilog=exit_codes(
            failed="the session was idle: nothing to abort",
            interrupted="the abort may or may not have been sent",
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    abort.add_argument("session", metavar="SID", help="the session id")
    abort.add_argument("--reason", help="recorded in the abort (default: aborted by user)")
    add_connection_options(abort)
    abort.set_defaults(handler=abort_command)


async def _approve(args: argparse.Namespace, client: AgentClient) -> int:
    await client.approve(args.session, args.tool_call_id, args.decision)
    say(f"{args.decision}: {args.tool_call_id} in session {args.session}", "dim")
    return EXIT_OK


async def _abort(args: argparse.Namespace, client: AgentClient) -> int:
    if await client.abort(args.session, args.reason):
        say(f"aborted the task of session {args.session}", "dim")
        return EXIT_OK
    say(f"omni-grpc abort: session {args.session} is idle: nothing to abort")
    return EXIT_RUN_FAILED


def approve_command(args: argparse.Namespace) -> int:
    return client_command(
        "omni-grpc approve",
        args,
        lambda client: _approve(args, client),
        interrupted="interrupted",
    )


def abort_command(args: argparse.Namespace) -> int:
    return client_command(
        "omni-grpc abort",
        args,
        lambda client: _abort(args, client),
        interrupted="interrupted",
    )
