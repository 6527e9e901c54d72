"""``omni-grpc history SID``: a session's recorded messages (its trace).

``--json`` prints them as JSONL in the reference's exact bytes, the same bytes
as the trace file on the server: ``history SID --json > copy.jsonl`` is a
copy of the trace, which ``omni-grpc validate`` and ``convert`` read.
``--tail N`` prints only the newest N tasks (from the prompt that opened the
oldest of them), read by the server without reading the whole trace; with
``--json`` those are the trace's last lines, byte for byte.
"""

from __future__ import annotations

import argparse
import sys

from omni_grpc.cli.connection import add_connection_options
from omni_grpc.cli.exits import EXIT_OK, client_command, exit_codes
from omni_grpc.client import AgentClient

PROG = "omni-grpc history"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "history",
        help="print a session's recorded messages (--json: the trace's exact bytes)",
        description="Print a session's recorded messages. With --json, as JSONL "
        "byte-identical to the session's trace file.",
        epilog=exit_codes(interrupted="nothing changes"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("session", metavar="SID", help="the session id")
    parser.add_argument("--json", action="store_true", help="print the trace as JSONL")
    parser.add_argument(
        "--tail",
        type=_count,
        default=0,
        metavar="N",
        help="only the newest N tasks (each from its prompt on)",
    )
    add_connection_options(parser)
    parser.set_defaults(handler=history_command)


def _count(raw: str) -> int:
    if not (raw.isascii() and raw.isdigit()) or int(raw) < 1 or int(raw) > 2**32 - 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of tasks from 1, not {raw!r}")
    return int(raw)


async def print_history(args: argparse.Namespace, client: AgentClient) -> int:
    if args.json:
        out = sys.stdout.buffer
        async for line in client.history_lines(args.session, page_size=args.tail):
            out.write(line + b"\n")
        out.flush()
        return EXIT_OK
    # Imported here: `history --json` copies the server's bytes and needs
    # neither rich nor the codec (benchmarks/cli_startup.py).
    from omni_grpc.cli.render import HistoryRenderer, Output
    from omni_grpc.convert import message_to_dict

    renderer = HistoryRenderer(Output(highlight=False))
    async for message in client.history(args.session, page_size=args.tail):
        renderer.show_message(message_to_dict(message))
    return EXIT_OK


def history_command(args: argparse.Namespace) -> int:
    return client_command(
        PROG,
        args,
        lambda client: print_history(args, client),
        interrupted="interrupted",
    )
