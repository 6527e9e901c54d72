"""``omni-grpc attach SID [--after ID]``: the live view of a session's task.

The way back after a dropped connection, a Ctrl-C or ``run --detach``: it
replays what came after ``--after`` (the last event id seen), then follows the
running task to its end with the same rendering as ``run``. Ctrl-C only
detaches this view; ``omni-grpc abort`` stops the task.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import AsyncIterator, Callable

from rich.console import Console
from rich.text import Text

from omni_grpc.cli.connection import add_connection_options, connection_flags
from omni_grpc.cli.exits import (
    EXIT_OK,
    EXIT_RUN_FAILED,
    EXIT_USAGE,
    client_command,
    exit_codes,
    say,
)
from omni_grpc.cli.ids import IDS_HELP
from omni_grpc.cli.pipes import stdout_gone
from omni_grpc.cli.render import (
    Output,
    Renderer,
    fell_behind,
    follow,
    incomplete,
    tool_call_id,
)
from omni_grpc.client import AgentClient, StreamEvent
from omni_grpc.client.agent_client import RESUME_ATTEMPTS
from omni_grpc.client.errors import AgentError
from omni_grpc.event_ids import parse_event_id

PROG = "omni-grpc attach"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "attach",
        help="follow a session's running task (after a dropped connection or --detach)",
        description="Replay a session's events after --after, then follow its task live "
        "until the session is idle, rendered as `run` renders. On a terminal, pending "
        "approvals are asked about; otherwise the command that answers them is shown. "
        "Ctrl-C detaches and leaves the task running.",
        epilog=exit_codes(
            failed="the task followed was aborted or failed, or this reader fell "
            "behind the live stream and the server dropped events it had not read",
            interrupted="the task keeps running",
            usage="bad usage (arguments, an --after that is no event id or a future one)",
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("session", metavar="SID", help="the session id")
    parser.add_argument("--after", metavar="ID", help="the last event id already seen")
    parser.add_argument("--json", action="store_true", help="print OmniMessages as JSONL")
    parser.add_argument("--ids", action="store_true", help=IDS_HELP)
    parser.add_argument(
        "--follow",
        action="store_true",
        help="keep following across tasks instead of ending when the session is idle",
    )
    add_connection_options(parser)
    parser.set_defaults(handler=attach_command)


def _newer_than(baseline: str | None) -> Callable[[str], bool]:
    """A predicate: is an event id later than ``baseline`` (the session's newest
    id before attaching)? Replayed events are not; the live ones are."""
    parsed = parse_event_id(baseline) if baseline else None

    def newer(event_id: str) -> bool:
        if parsed is None:
            return True
        current = parse_event_id(event_id)
        return current is None or current[0] != parsed[0] or current[1] > parsed[1]

    return newer


def _reached(baseline: str | None) -> Callable[[str], bool]:
    """A predicate: has the replay reached the session's newest id as of
    attaching? Events after it (or without an id: sent after the replay) are
    live."""
    parsed = parse_event_id(baseline) if baseline else None

    def reached(event_id: str) -> bool:
        current = parse_event_id(event_id) if event_id else None
        return (
            parsed is None or current is None or current[0] != parsed[0] or current[1] >= parsed[1]
        )

    return reached


def malformed_after(after: str | None) -> str | None:
    """Why ``--after`` is no event id at all, or None."""
    if after is not None and parse_event_id(after) is None:
        return f"--after {after!r} is not an event id (they look like 3f2a9c1e-42)"
    return None


def future_after(after: str | None, baseline: str | None) -> str | None:
    """Why ``--after`` cannot name an event of this session yet, or None."""
    parsed = parse_event_id(after) if after else None
    if parsed is None:
        return None
    newest = parse_event_id(baseline) if baseline else None
    if newest is not None and parsed[0] == newest[0] and parsed[1] > newest[1]:
        return f"--after {after} is later than the session's newest event, {baseline}"
    return None


async def attach(args: argparse.Namespace, client: AgentClient, err: Console) -> int:
    # The newest id before attaching tells a replayed task end (an earlier
    # task's) from the end of the task that is running now.
    baseline = next(
        (s.last_event_id for s in await client.list_sessions() if s.session_id == args.session),
        None,
    )
    refused = future_after(args.after, baseline)
    if refused is not None:
        say(f"{PROG}: error: {refused}")
        return EXIT_USAGE
    newer, reached = _newer_than(baseline), _reached(baseline)

    def ends_at(event: StreamEvent) -> bool:
        return not args.follow and event.is_task_end and newer(event.event_id)

    def on_approval(event: StreamEvent) -> None:
        say(
            f"approval pending: omni-grpc approve {event.session_id} {tool_call_id(event)} "
            f"'allow|deny'{connection_flags(args)}",
            "yellow",
        )

    # Events received so far: a resync_required first is the answer to an
    # --after the server no longer buffers; one later means this reader fell
    # behind the live stream and missed events (a gap: exit 1).
    received = 0
    lagged = False

    def on_gap(event: StreamEvent) -> None:
        nonlocal lagged
        if received == 1 and args.after is not None:
            say(
                f"events after {args.after} are no longer buffered; "
                f"`omni-grpc history {args.session}` has the whole record",
                "yellow",
            )
            return
        lagged = True
        say(fell_behind(PROG, event))

    ask = sys.stdin.isatty() and err.is_terminal and not (args.json or args.ids)
    renderer = Renderer(Output(highlight=False), attempts=lambda: client.max_attempts)
    last = ""

    async def events() -> AsyncIterator[StreamEvent]:
        """The stream, with the replay's approval requests held back until
        the replay is over: one answered since is followed by its decision
        in the replay and must be neither asked nor hinted at, and one still
        pending is offered once."""
        nonlocal last, received
        replaying = args.after is not None
        held: dict[str, StreamEvent] = {}
        answered: set[str] = set()
        # Pending requests are sent again after the replay: offer each once.
        offered: set[str] = set()

        def on_resume(error: AgentError, attempt: int, after: str) -> None:
            say(
                f"the stream broke ({error.code.name}); attaching again"
                f"{f' after {after}' if after else ''}, attempt {attempt}/{RESUME_ATTEMPTS}",
                "yellow",
            )

        async for event in client.follow(args.session, args.after, on_resume=on_resume):
            last = event.event_id or last
            received += 1
            if event.kind == "approval_decision" and event.message is not None:
                call_id = event.message.approval_decision.tool_call_id
                answered.add(call_id)
                held.pop(call_id, None)
            if event.kind != "@approval_request":
                yield event
            elif replaying:
                held[tool_call_id(event)] = event
            elif tool_call_id(event) not in answered | offered:
                offered.add(tool_call_id(event))
                yield event
            if replaying and reached(event.event_id):
                replaying = False
                offered.update(held)
                for pending in held.values():
                    yield pending
                held.clear()

    try:
        await follow(client, events(), renderer, err, as_json=args.json or args.ids,
                     ids=args.ids, ask=ask,
                     ends_at=ends_at, on_approval=on_approval, on_gap=on_gap)  # fmt: skip
    except BrokenPipeError:
        return stdout_gone()
    if last:
        err.print(Text(f"session {args.session}, last event {last}", style="dim"), soft_wrap=True)
    if lagged:
        say(incomplete(PROG, args.session))
        return EXIT_RUN_FAILED
    return EXIT_RUN_FAILED if renderer.failed else EXIT_OK


def attach_command(args: argparse.Namespace) -> int:
    malformed = malformed_after(args.after)
    if malformed is not None:
        say(f"{PROG}: error: {malformed}")
        return EXIT_USAGE
    return client_command(
        PROG,
        args,
        lambda client: attach(args, client, Console(stderr=True)),
        interrupted="interrupted: detached, the task keeps running",
    )
