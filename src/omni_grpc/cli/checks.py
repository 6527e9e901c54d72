"""Argument types for ``serve``: a bad value is a usage error (exit 2) naming
its flag at startup, not a wrapped port or a traceback on the first run."""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable
from pathlib import Path

from omni_grpc.runtime.approvals import ApprovalMode, parse_modes


def port(text: str) -> int:
    value = _int(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{text} is not a TCP port (0-65535; 0 picks a free one)")
    return value


def at_least(low: int, high: int | None = None) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = _int(text)
        if value < low or (high is not None and value > high):
            bound = f"between {low} and {high}" if high is not None else f"at least {low}"
            raise argparse.ArgumentTypeError(f"{text} must be {bound}")
        return value

    return parse


def seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not (value >= 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"{text} must be a finite number >= 0")
    return value


def positive_seconds(text: str) -> float:
    value = seconds(text)
    if value == 0:
        raise argparse.ArgumentTypeError(f"{text} must be a finite number > 0")
    return value


def readable_file(text: str) -> Path:
    path = Path(text).expanduser()
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"{text}: no such file")
    if not os.access(path, os.R_OK):
        raise argparse.ArgumentTypeError(f"{text}: not readable")
    return path


def approval_modes(text: str) -> tuple[ApprovalMode, ...]:
    try:
        modes = parse_modes(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return modes


def data_dir_problem(path: Path) -> str | None:
    """Why the server could not keep its ``traces/`` and ``workspaces/`` under
    ``path``, or None. Creates ``path`` (as the server would) and tries a file
    in it: permission bits say nothing for root, nor about a read-only mount."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        return "not a directory"
    except OSError as exc:
        return f"cannot be created ({exc.strerror})"
    for folder in (path, path / "traces", path / "workspaces"):
        if folder.exists() and not folder.is_dir():
            return f"{folder}: not a directory"
    probe = path / f".omni-grpc-probe-{os.getpid()}"
    try:
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        return f"not writable ({exc.strerror})"
    return None


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
