"""A closed stdout (``omni-grpc run ... | head``) ends a command quietly.

Python ignores SIGPIPE, so a write to a closed pipe raises BrokenPipeError
instead of ending the process as it would a C tool. Commands catch it, stop
their work, and exit with the status a shell reports for a process SIGPIPE
ended (128 + 13), next to the 130 (128 + SIGINT) of Ctrl-C.
"""

from __future__ import annotations

import contextlib
import os
import sys

EXIT_BROKEN_PIPE = 141


def stdout_gone() -> int:
    """Points stdout at /dev/null, so the interpreter's last flush of what is
    still buffered fails quietly too, and returns the exit status to use."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    return EXIT_BROKEN_PIPE
