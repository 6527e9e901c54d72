"""Large blocks straight from the kernel and back (glibc only).

glibc raises its mmap threshold to the size of any mapped block freed (up to
32 MiB): after one large message, the next ones come from the heap, where a
freed block is kept and a grown one copied, so a server carrying multi-MiB
messages to ten readers peaked at ~23x the message instead of ~15x
(BENCHMARKS.md, "Large messages"). A fixed threshold keeps every block of a
MiB or more mapped: freed at once, grown in place. ``MALLOC_MMAP_THRESHOLD_``
in the environment, when set, wins.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

_M_MMAP_THRESHOLD = -3  # malloc.h
THRESHOLD = 1 << 20


def map_large_blocks() -> bool:
    """True when the threshold was set (glibc, and not set by the environment)."""
    if "MALLOC_MMAP_THRESHOLD_" in os.environ:
        return False
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, THRESHOLD))
