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
from typing import Any

from rich.console import Console
from rich.text import Text

from omni_grpc.cli.connection import add_connection_options
from omni_grpc.cli.exits import EXIT_OK, client_command, exit_codes
from omni_grpc.cli.render import Output, Renderer
from omni_grpc.client import AgentClient
from omni_grpc.convert import message_to_dict

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


class HistoryRenderer(Renderer):
    """The live view's rendering, plus the user's own turns (a live run
    leaves them out because the user has just typed them)."""

    def _on_text(self, p: dict[str, Any]) -> None:
        if p.get("role") == "user":
            self.console.print(Text(f"> {p.get('text', '')}", style="bold"))
        else:
            super()._on_text(p)


async def print_history(args: argparse.Namespace, client: AgentClient, err: Console) -> int:
    if args.json:
        out = sys.stdout.buffer
        async for line in client.history_lines(args.session, page_size=args.tail):
            out.write(line + b"\n")
        out.flush()
        return EXIT_OK
    renderer = HistoryRenderer(Output(highlight=False))
    async for message in client.history(args.session, page_size=args.tail):
        renderer.show_message(message_to_dict(message))
    return EXIT_OK


def history_command(args: argparse.Namespace) -> int:
    return client_command(
        PROG,
        args,
        lambda client, err: print_history(args, client, err),
        interrupted="interrupted",
    )
