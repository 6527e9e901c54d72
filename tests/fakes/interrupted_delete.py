"""A replica that dies inside a delete (tests/test_delete_interrupted.py).

``python interrupted_delete.py DATA_DIR STEP PURGE [REDIS_URL PREFIX]``: a hub
on DATA_DIR (and the Redis at REDIS_URL under PREFIX) runs one task on a new
session to its end, then deletes the session with STEP held for ever, and
prints ``HELD <session id>`` once there, for the test to SIGKILL it. STEP:
``marked`` (the delete's mark is written, nothing freed yet) or ``files``
(its trace removed or moved, its workspace not yet).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import threading
from pathlib import Path
from typing import Any

from omni_grpc import protocol
from omni_grpc.convert import message_from_dict
from omni_grpc.engines.demo import DemoEngine
from omni_grpc.runtime import retention, trace_store
from omni_grpc.runtime.backend import Backend
from omni_grpc.runtime.hub import Hub, RunRequest

NEVER = threading.Event()  # what a held step waits on: never set


def held(session_id: str) -> None:
    sys.stdout.write(f"HELD {session_id}\n")
    sys.stdout.flush()


async def main(data: Path, step: str, purge: bool, redis: tuple[str, str] | None) -> None:
    backend: Backend | None = None
    if redis is not None:
        from omni_grpc.runtime.redis import redis_backend

        backend = redis_backend(redis[0], prefix=redis[1])
    hub = Hub(DemoEngine(), data, backend=backend)
    text = message_from_dict(protocol.user_text("list my files"))
    session_id, sub = await hub.run(RunRequest(input=[text]))
    sub.close()
    await hub.wait_idle(session_id)

    if step == "marked":

        async def hold_free(_self: Any, sid: str) -> None:
            held(sid)
            await asyncio.Event().wait()

        retention.Retention._free = hold_free  # type: ignore[method-assign]
    else:
        workspace = data / "workspaces" / session_id
        replace, rmtree = os.replace, shutil.rmtree

        def hold_replace(src: Any, dst: Any) -> None:
            if Path(src) == workspace:
                held(session_id)
                NEVER.wait()
            replace(src, dst)

        def hold_rmtree(path: Any, *args: Any, **kwargs: Any) -> None:
            if Path(path) == workspace:
                held(session_id)
                NEVER.wait()
            rmtree(path, *args, **kwargs)

        trace_store.os.replace = hold_replace  # type: ignore[assignment]
        trace_store.shutil.rmtree = hold_rmtree  # type: ignore[assignment]
    await hub.delete_session(session_id, delete_trace=purge)


if __name__ == "__main__":
    data_dir, held_step, purge_flag = Path(sys.argv[1]), sys.argv[2], sys.argv[3] == "1"
    where = (sys.argv[4], sys.argv[5]) if len(sys.argv) > 5 else None
    asyncio.run(main(data_dir, held_step, purge_flag, where))
