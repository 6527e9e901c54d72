"""How client commands end: one table of exit statuses, one way to report.

Every client command (``run``, ``attach``, ``sessions``, ``history``,
``approve``, ``abort``) runs through :func:`client_command`, so a refused call,
Ctrl-C and a closed stdout end each of them the same way.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from collections.abc import Awaitable, Callable

from rich.console import Console
from rich.text import Text

from omni_grpc.cli.connection import ConnectionUsageError, check_connection_options, client_from
from omni_grpc.cli.pipes import EXIT_BROKEN_PIPE, stdout_gone
from omni_grpc.client import AgentClient, AgentError

EXIT_OK, EXIT_RUN_FAILED, EXIT_USAGE, EXIT_RPC, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


def exit_codes(
    *, failed: str | None = None, interrupted: str, usage: str = "bad usage (arguments)"
) -> str:
    """The ``exit status:`` epilog; ``failed`` says what 1 means for this
    command (None: it does not use 1), ``interrupted`` what Ctrl-C leaves."""
    lines = [f"  {EXIT_OK}    success"]
    if failed is not None:
        lines.append(f"  {EXIT_RUN_FAILED}    {failed}")
    lines += [
        f"  {EXIT_USAGE}    {usage}",
        f"  {EXIT_RPC}    the call itself failed (connection, auth, a refused request)",
        f"  {EXIT_INTERRUPTED}  interrupted by Ctrl-C ({interrupted})",
        f"  {EXIT_BROKEN_PIPE}  stdout was closed, e.g. by `| head`",
    ]
    return "exit status:\n" + "\n".join(lines)


def say(err: Console, text: str, style: str = "red") -> None:
    """One stderr line, whole: rich would soft-wrap it at 80 columns off a
    terminal, and read brackets in it (an IPv6 address) as markup."""
    err.print(Text(text, style=style), soft_wrap=True)


def describe_error(exc: AgentError) -> str:
    """The status line, plus the field violations it does not already say."""
    text = str(exc)
    extra = [f"{f}: {d}" for f, d in exc.field_violations if f"{f}: {d}" not in text]
    return text + (f" ({'; '.join(extra)})" if extra else "")


Body = Callable[[AgentClient, Console], Awaitable[int]]


def client_command(
    prog: str,
    args: argparse.Namespace,
    body: Body,
    *,
    interrupted: str,
    err: Console | None = None,
) -> int:
    """Connects as ``args`` say, awaits ``body(client, err)`` and maps how it
    ended to an exit status. ``interrupted`` is the line Ctrl-C prints."""
    err = err or Console(stderr=True)
    try:
        check_connection_options(args)
    except ConnectionUsageError as exc:
        say(err, f"{prog}: {exc}")
        return EXIT_USAGE

    interrupts = 0

    def on_interrupt(task: asyncio.Task[int]) -> None:
        nonlocal interrupts
        interrupts += 1
        if interrupts > 1:
            raise KeyboardInterrupt  # a second Ctrl-C does not wait for the cleanup
        task.cancel()

    async def main() -> int:
        # The loop's own handler, not asyncio.run's: the kernel may hand SIGINT
        # to one of gRPC's threads, and only the loop's wakeup fd then stops the
        # main thread waiting in epoll (a terminal prompt would hang there).
        task = asyncio.current_task()
        assert task is not None
        asyncio.get_running_loop().add_signal_handler(signal.SIGINT, on_interrupt, task)
        client = client_from(args)
        try:
            return await body(client, err)
        except AgentError as exc:
            say(err, f"{prog}: {describe_error(exc)}")
            return EXIT_RPC
        finally:
            await client.close()

    try:
        return asyncio.run(main())
    except KeyboardInterrupt:
        say(err, interrupted)
        return EXIT_INTERRUPTED
    except asyncio.CancelledError:
        if not interrupts:
            raise
        say(err, interrupted)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return stdout_gone()
    except OSError as exc:  # a TLS file that cannot be read
        say(err, f"{prog}: {exc}")
        return EXIT_USAGE
