"""A real, small disk for storage-failure tests: a tmpfs mounted for the test
(the machine's tests run as root), filled on demand.

``fill()`` takes every free byte; ``leave(pages)`` then gives back that many
pages, so a run starts (its first records fit) and fails part-way, the way a
disk that fills up during a run fails it.
"""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

PAGE = 4096  # a tmpfs counts whole pages


class SmallDisk:
    def __init__(self, mountpoint: Path) -> None:
        self.path = mountpoint
        self.filler = mountpoint / "filler"

    def fill(self) -> None:
        """Takes every free byte."""
        fd = os.open(self.filler, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            for size in (1 << 20, PAGE, 1):
                while True:
                    try:
                        os.write(fd, b"\0" * size)
                    except OSError as exc:
                        assert exc.errno == errno.ENOSPC
                        break
        finally:
            os.close(fd)

    def leave(self, pages: int) -> None:
        """Fills the disk, then frees ``pages`` whole pages of it again."""
        self.fill()
        size = self.filler.stat().st_size
        os.truncate(self.filler, max(0, size - size % PAGE - pages * PAGE))

    def free(self) -> None:
        self.filler.unlink(missing_ok=True)

    def remount(self, mode: str) -> None:
        subprocess.run(["mount", "-o", f"remount,{mode}", str(self.path)], check=True)


def mounted_small_disk(tmp_path: Path, size: str = "8m") -> Iterator[SmallDisk]:
    """The body of the ``small_disk`` fixture (tests/conftest.py)."""
    mountpoint = tmp_path / "disk"
    mountpoint.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mountpoint)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        message = f"cannot mount a tmpfs: {done.stderr.strip()}"
        if os.environ.get("OMNI_REQUIRE_TOOLCHAINS") or os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    try:
        yield SmallDisk(mountpoint)
    finally:
        subprocess.run(["umount", "-l", str(mountpoint)], check=False)
