"""``omni-grpc sessions``: the server's sessions, newest first, with their state."""

from __future__ import annotations

import argparse
import json
import sys

from rich.console import Console

from omni_grpc.cli.connection import add_connection_options
from omni_grpc.cli.exits import EXIT_OK, client_command, exit_codes
from omni_grpc.client import AgentClient
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


def state_name(state: int) -> str:
    return _STATES.get(state, "unknown")


async def list_sessions(args: argparse.Namespace, client: AgentClient, err: Console) -> int:
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
        lambda client, err: list_sessions(args, client, err),
        interrupted="interrupted",
    )
