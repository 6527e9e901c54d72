"""How client commands end: one table of exit statuses, one way to report.

Every client command (``run``, ``attach``, ``sessions``, ``history``,
``approve``, ``abort``) runs through :func:`client_command`, so a refused call,
Ctrl-C and a closed stdout end each of them the same way.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from collections.abc import Awaitable, Callable

import grpc

from omni_grpc.cli.connection import (
    DEFAULT_TARGET,
    ConnectionUsageError,
    check_connection_options,
    client_from,
)
from omni_grpc.cli.pipes import EXIT_BROKEN_PIPE, stdout_gone
from omni_grpc.cli.target import split_url, with_default_port
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


# The styles say() knows, as SGR codes. Plain escapes, not rich: `abort`,
# `approve` and `sessions` print nothing else, and importing rich would cost
# them a third of their start (benchmarks/cli_startup.py).
_STYLES = {"red": "31", "yellow": "33", "dim": "2"}


def _colour() -> bool:
    """rich's rule: on a terminal unless NO_COLOR or TERM=dumb; FORCE_COLOR forces."""
    if os.environ.get("FORCE_COLOR"):
        return True
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    return sys.stderr.isatty()


def say(text: str, style: str = "red") -> None:
    """One stderr line, whole: never wrapped at the terminal's width, and
    never read as markup (an IPv6 address has brackets)."""
    if _colour() and style in _STYLES:
        text = f"\x1b[{_STYLES[style]}m{text}\x1b[0m"
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def describe_error(exc: AgentError) -> str:
    """The status line, plus the field violations it does not already say."""
    text = str(exc)
    extra = [f"{f}: {d}" for f, d in exc.field_violations if f"{f}: {d}" not in text]
    return text + (f" ({'; '.join(extra)})" if extra else "")


def hint(exc: AgentError, args: argparse.Namespace) -> str | None:
    """What to do about a call that never reached a server, or was refused at
    the door: gRPC's own words name the symptom, not the remedy."""
    address = with_default_port(split_url(args.target)[0])
    message = exc.message.lower()
    if exc.code is grpc.StatusCode.UNAVAILABLE and "connect" in message:
        tls = args.tls or args.tls_ca or args.target.startswith("grpcs://")
        # Refused: nothing listens there. Otherwise something answered but the
        # connection failed, which a plain client meeting a TLS server does.
        tls_hint = "; a server started with --tls-cert needs --tls or --tls-ca"
        if tls or "refused" in message:
            tls_hint = ""
        return (
            f"nothing answered at {address}: is `omni-grpc serve` running? Give the gRPC "
            f"address it prints with --target (default $OMNI_TARGET, else "
            f"{DEFAULT_TARGET}){tls_hint}"
        )
    if exc.code is grpc.StatusCode.UNAUTHENTICATED:
        given = "the token given was refused" if args.token else "no token was given"
        return (
            f"the server at {address} wants a bearer token ({given}): pass --token or set "
            f"$OMNI_AUTH_TOKEN"
        )
    return None


Body = Callable[[AgentClient], Awaitable[int]]


def client_command(
    prog: str,
    args: argparse.Namespace,
    body: Body,
    *,
    interrupted: str,
) -> int:
    """Connects as ``args`` say, awaits ``body(client)`` and maps how it
    ended to an exit status. ``interrupted`` is the line Ctrl-C prints."""
    try:
        check_connection_options(args)
    except ConnectionUsageError as exc:
        say(f"{prog}: {exc}")
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
            return await body(client)
        except AgentError as exc:
            say(f"{prog}: {describe_error(exc)}")
            if (remedy := hint(exc, args)) is not None:
                say(f"{prog}: {remedy}", "yellow")
            return EXIT_RPC
        finally:
            await client.close()

    try:
        return asyncio.run(main())
    except KeyboardInterrupt:
        say(interrupted)
        return EXIT_INTERRUPTED
    except asyncio.CancelledError:
        if not interrupts:
            raise
        say(interrupted)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return stdout_gone()
    except OSError as exc:  # a TLS file that cannot be read
        say(f"{prog}: {exc}")
        return EXIT_USAGE
