"""``omni-grpc sessions``: the server's sessions, newest first, with their
state; ``omni-grpc sessions rm SID...`` deletes sessions (DeleteSession)."""

from __future__ import annotations

import argparse
import json
import sys

from omni_grpc.cli.connection import add_connection_options
from omni_grpc.cli.exits import (
    EXIT_OK,
    EXIT_RPC,
    client_command,
    describe_error,
    exit_codes,
    say,
)
from omni_grpc.client import AgentClient, AgentError
from omni_grpc_proto.omni.v1 import agent_service_pb2 as pb

PROG = "omni-grpc sessions"
_STATES: dict[int, str] = {
    pb.SESSION_STATE_IDLE: "idle",
    pb.SESSION_STATE_RUNNING: "running",
    pb.SESSION_STATE_COMPACTING: "compacting",
}
_COLUMNS = ("SESSION", "STATE", "CREATED", "UPDATED", "MESSAGES", "LAST EVENT")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "sessions",
        help="list the server's sessions, newest first",
        description="List the server's sessions, newest first: id, state, times, the "
        "number of recorded messages and the newest event id (for attach --after).",
        epilog=exit_codes(interrupted="nothing changes"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--json", action="store_true", help="one JSON object per session")
    add_connection_options(parser)
    parser.set_defaults(handler=sessions_command)
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=False)
    remove = actions.add_parser(
        "rm",
        help="delete sessions",
        description="Delete each session SID: a running task is aborted first (its "
        "stream ends with the abort), then the session leaves the server's index and "
        "its streams end. The trace is kept under the server's <data-dir>/deleted/ "
        "unless --delete-trace removes it with the workspace. Every SID is tried, "
        "whatever happened to the ones before it.",
        epilog=exit_codes(interrupted="the sessions named before it may be deleted"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    remove.add_argument("sessions", metavar="SID", nargs="+", help="the session ids")
    remove.add_argument(
        "--delete-trace", action="store_true", help="remove the trace and workspace too"
    )
    remove.add_argument("--json", action="store_true", help="one JSON object per deletion")
    add_connection_options(remove)
    # The connection flags may come before `rm` too (`sessions --target X rm
    # SID`): left unset here, rm's defaults do not overwrite them.
    for action in remove._actions:
        if action.dest in {a.dest for a in parser._actions if a.option_strings}:
            action.default = argparse.SUPPRESS
    remove.set_defaults(handler=remove_command)


def state_name(state: int) -> str:
    return _STATES.get(state, "unknown")


async def list_sessions(args: argparse.Namespace, client: AgentClient) -> int:
    sessions = sorted(
        await client.list_sessions(), key=lambda s: (s.created_at, s.session_id), reverse=True
    )
    out = sys.stdout
    if args.json:
        for s in sessions:
            entry = {
                "session_id": s.session_id,
                "state": state_name(s.state),
                "created_at": s.created_at,
                "updated_at": s.updated_at,
                "message_count": s.message_count,
                "last_event_id": s.last_event_id,
            }
            out.write(json.dumps(entry, ensure_ascii=False) + "\n")
    else:
        rows = [_COLUMNS] + [
            (
                s.session_id,
                state_name(s.state),
                s.created_at,
                s.updated_at,
                str(s.message_count),
                s.last_event_id or "-",
            )
            for s in sessions
        ]
        widths = [max(len(row[i]) for row in rows) for i in range(len(_COLUMNS))]
        for row in rows:
            cells = (cell.ljust(w) for cell, w in zip(row, widths, strict=True))
            out.write("  ".join(cells).rstrip() + "\n")
    out.flush()
    return EXIT_OK


def sessions_command(args: argparse.Namespace) -> int:
    return client_command(
        PROG,
        args,
        lambda client: list_sessions(args, client),
        interrupted="interrupted",
    )


async def remove_sessions(args: argparse.Namespace, client: AgentClient) -> int:
    code = EXIT_OK
    for session_id in args.sessions:
        try:
            was_running = await client.delete_session(session_id, delete_trace=args.delete_trace)
        except AgentError as exc:
            say(f"{PROG} rm: {session_id}: {describe_error(exc)}")
            code = EXIT_RPC
            continue
        if args.json:
            entry = {
                "session_id": session_id,
                "was_running": was_running,
                "trace_deleted": args.delete_trace,
            }
            sys.stdout.write(json.dumps(entry) + "\n")
            sys.stdout.flush()
        kept = "trace removed" if args.delete_trace else "trace kept under deleted/"
        ran = "; its running task was aborted" if was_running else ""
        say(f"deleted session {session_id} ({kept}){ran}", "dim")
    return code


def remove_command(args: argparse.Namespace) -> int:
    return client_command(
        f"{PROG} rm",
        args,
        lambda client: remove_sessions(args, client),
        interrupted="interrupted: the sessions named before it may be deleted",
    )
