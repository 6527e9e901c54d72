"""One owner per data dir: the lock a server holds on its data dir for its life.

A server on its own (the memory backend) repairs traces at startup and
appends to them without asking anyone, so a second server on the same data
dir would close the first one's live runs as "interrupted" and interleave its
writes. The lock is an ``flock`` on ``<data-dir>/serve.lock``, taken before
anything under the data dir is read or repaired and held until the server
stops (the kernel drops it when the process dies, so a crash leaves no stale
lock). Replicas sharing sessions through Redis share the data dir by design:
each takes the lock shared, so they run side by side, and a server on its own
is refused beside them (and they beside it).

The file holds the exclusive holder's pid, so the refusal can name it; the
kernel's lock table (``/proc/locks``) names shared holders too.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

LOCK_NAME = "serve.lock"


class DataDirInUse(OSError):
    """Another live server holds the data dir."""

    def __init__(self, data_dir: Path, holders: list[int], *, shared: bool) -> None:
        self.data_dir = data_dir
        self.holders = holders
        # The holders share the data dir through Redis.
        self.holders_shared = shared
        who = ", ".join(str(pid) for pid in holders) if holders else "unknown"
        if shared:
            what = f"replicas sharing it through --redis-url (pid {who})"
        else:
            what = f"another omni-grpc server (pid {who})"
        super().__init__(
            f"data dir {data_dir} is in use by {what}; stop it, or give this server "
            "another --data-dir" + ("" if shared else " (or --redis-url on both, to share it)")
        )


class DataDirLock:
    def __init__(self, data_dir: Path, *, shared: bool = False) -> None:
        self.data_dir = data_dir
        self.path = data_dir / LOCK_NAME
        # Shared: a replica of several behind one Redis.
        self.shared = shared
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        """Takes the lock, or raises DataDirInUse naming the holders' pids."""
        if self._fd is not None:
            return
        self.data_dir.mkdir(parents=True, exist_ok=True)
        # Held open read-only: a file open for writing would keep the data
        # dir's file system from being remounted read-only under the server.
        fd = os.open(self.path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, (fcntl.LOCK_SH if self.shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except BlockingIOError:
            holders = _holders(fd)
            written = _written_pid(fd)
            os.close(fd)
            # A written pid is an exclusive holder's (shared ones write none).
            exclusive_holder = written is not None and (not holders or written in holders)
            if exclusive_holder and written is not None:
                holders = [written]
            raise DataDirInUse(self.data_dir, holders, shared=not exclusive_holder) from None
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        # Holding it shared means no exclusive holder is alive: a pid in the
        # file is a crashed one's, and would misname the holders.
        if not self.shared:
            self._write(f"{os.getpid()}\n")
        elif _written_pid(fd) is not None:
            self._write("")

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        if not self.shared:
            self._write("")  # before unlocking: no one reads a stale pid
        os.close(fd)  # drops the flock

    def _write(self, text: str) -> None:
        """Replaces the file's text (best effort: the lock is the fd's flock)."""
        with contextlib.suppress(OSError):
            fd = os.open(self.path, os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC)
            try:
                os.write(fd, text.encode())
            finally:
                os.close(fd)


def _written_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 64, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _holders(fd: int) -> list[int]:
    """The pids the kernel's lock table shows holding a flock on ``fd``'s file."""
    st = os.fstat(fd)
    wanted = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    pids: list[int] = []
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as table:
            for line in table:
                fields = line.split()
                # "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF"; "->" marks a waiter.
                if "->" in fields or len(fields) < 6 or fields[1] != "FLOCK":
                    continue
                if fields[5] == wanted and fields[4].isdigit():
                    pids.append(int(fields[4]))
    except OSError:
        return []
    return sorted(set(pids))
