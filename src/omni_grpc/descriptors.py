"""File descriptors: the connection caps of all listeners together leave a
reserve for everything else a run needs.

A run writes its trace, a Redis backend holds its pool, an engine may start a
process or open an upstream connection. When client connections use every
descriptor the process may hold, those fail instead ("trace could not be
written (Too many open files)") and health turns NOT_SERVING. So at startup
the soft ``RLIMIT_NOFILE`` is raised as far as the hard one allows (as Go's
runtime and nginx's ``worker_rlimit_nofile`` do), and when the listeners' caps
still add up to more than the limit minus ``RESERVED`` and the descriptors
already open, each cap is scaled down to fit, with a warning naming the new
caps.
"""

from __future__ import annotations

import logging
import os
import resource

log = logging.getLogger(__name__)

# Descriptors kept out of every connection cap: traces and their index files,
# the data-dir lock, the Redis pool, engine processes, logs.
RESERVED = 128


def raise_soft_limit() -> int:
    """Raises the soft descriptor limit to the hard one; the limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass  # a container may refuse it: keep what we have
    return soft


def open_descriptors() -> int:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 0


def fit_caps(wanted: dict[str, int], reserve: int = RESERVED) -> tuple[dict[str, int], int]:
    """The descriptors each listener may hold (``wanted``, scaled down
    together when they would leave fewer than ``reserve`` free), and the limit."""
    limit = raise_soft_limit()
    free = limit - reserve - open_descriptors()
    total = sum(wanted.values())
    if total <= free:
        return dict(wanted), limit
    share = max(free, len(wanted))
    return {name: max(1, cap * share // total) for name, cap in wanted.items()}, limit


def warn_fitted(limit: int, wanted: dict[str, int], fitted: dict[str, int]) -> None:
    if fitted != wanted:
        log.warning(
            "descriptor limit %d (ulimit -n): connections per listener lowered to %s "
            "(from %s), with %d descriptors kept for traces and the backend",
            limit,
            ", ".join(f"{fitted[n]} {n}" for n in fitted),
            ", ".join(f"{wanted[n]} {n}" for n in wanted),
            RESERVED,
        )
