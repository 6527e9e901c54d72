"""A delete stays final when its replica dies in the middle of it (#43).

A delete writes its mark (``deleting/<sid>.purge`` or ``.keep``) before any
of its steps; a replica that starts finishes every marked delete before it
indexes the traces. The replica here is a real process, SIGKILLed while a
step of its delete is held (``tests/fakes/interrupted_delete.py``), on both
backends: after a new replica starts on the same data dir (and Redis), the
session is not listed, its history and a run on it are refused, nothing of
it is left under ``traces/`` or ``workspaces/`` (a kept copy is under
``deleted/`` whole), its mark is gone, and Redis holds no key of it.
A delete on a read-only disk cannot write its mark: it is refused and the
session stays whole and live.
"""

from __future__ import annotations

import asyncio
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from redis_server import RedisServer
from small_disk import SmallDisk

from omni_grpc import protocol
from omni_grpc.convert import message_from_dict
from omni_grpc.engines.demo import DemoEngine
from omni_grpc.runtime.backend import Backend
from omni_grpc.runtime.errors import SessionNotFound, StorageUnavailable
from omni_grpc.runtime.hub import Hub, RunRequest
from omni_grpc.trace import read_jsonl

CHILD = Path(__file__).parent / "fakes" / "interrupted_delete.py"
WAIT = 60.0  # a safety net against hangs, never the thing a test checks


def session_files(data: Path, where: str, session_id: str) -> list[Path]:
    return [p for p in (data / where).rglob("*") if session_id in str(p.relative_to(data))]


async def kill_inside_delete(
    data: Path, step: str, purge: bool, redis: tuple[str, str] | None
) -> str:
    """Runs the dying replica to ``step`` of its delete, then SIGKILLs it."""
    args = [sys.executable, str(CHILD), str(data), step, "1" if purge else "0"]
    child = subprocess.Popen([*args, *(redis or ())], stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(child.stdout.readline), WAIT)
        word, session_id = line.decode().split()
        assert word == "HELD"
    finally:
        child.kill()
        child.wait(WAIT)
    return session_id


@pytest.mark.parametrize("step", ["marked", "files"])
@pytest.mark.parametrize("purge", [False, True], ids=["keep", "purge"])
async def test_a_delete_whose_replica_died_is_finished_by_the_next_start(
    backend_kind: str, step: str, purge: bool, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    data = tmp_path / "data"
    redis: tuple[str, str] | None = None
    backend: Backend | None = None
    if backend_kind == "redis":
        from omni_grpc.runtime.redis import redis_backend

        server: RedisServer = request.getfixturevalue("redis_server")
        redis = (server.url, f"t{secrets.token_hex(4)}:")
        backend = redis_backend(redis[0], prefix=redis[1])
    session_id = await kill_inside_delete(data, step, purge, redis)
    assert list((data / "deleting").iterdir())  # the mark outlived its replica

    hub = Hub(DemoEngine(), data, backend=backend)
    try:
        await hub.start()
        assert session_id not in [s.session_id for s in await hub.list_sessions()]
        with pytest.raises(SessionNotFound):
            await hub.history(session_id)
        text = message_from_dict(protocol.user_text("hi"))
        with pytest.raises(SessionNotFound):
            await hub.run(RunRequest(input=[text], session_id=session_id))
    finally:
        # In a task of its own: awaited from the test's own task, a Redis
        # hub's shutdown did not return (its cause is not found yet).
        await asyncio.wait_for(hub.shutdown(), WAIT)
        if backend is not None:
            await backend.aclose()

    assert session_files(data, "traces", session_id) == []
    assert session_files(data, "workspaces", session_id) == []
    assert list((data / "deleting").iterdir()) == []
    kept = [p for p in session_files(data, "deleted", session_id) if p.suffix == ".jsonl"]
    if purge:
        assert session_files(data, "deleted", session_id) == []
    else:
        [shard] = kept
        first = next(iter(read_jsonl(shard))).message
        assert first.WhichOneof("payload") == "session_meta"
        assert (data / "deleted" / "workspaces" / session_id).is_dir()
    if redis is not None:
        client = aioredis.from_url(redis[0])
        try:
            keys = [k async for k in client.scan_iter(f"{redis[1]}*")]
            assert [k for k in keys if session_id.encode() in k] == []
            for key in keys:  # nor a member or field naming it
                kind = await client.type(key)
                if kind == b"set":
                    assert not await client.sismember(key, session_id)
                elif kind == b"zset":
                    assert await client.zscore(key, session_id) is None
                elif kind == b"hash":
                    assert not await client.hexists(key, session_id)
        finally:
            await client.aclose()
    # And a start after that has nothing left to finish: the session stays gone.
    again = Hub(DemoEngine(), data)
    try:
        await again.start()
        assert session_id not in [s.session_id for s in await again.list_sessions()]
    finally:
        await again.shutdown()


async def test_a_delete_on_a_read_only_disk_is_refused_and_the_session_stays(
    small_disk: SmallDisk,
) -> None:
    data = small_disk.path / "data"
    hub = Hub(DemoEngine(), data)
    try:
        text = message_from_dict(protocol.user_text("list my files"))
        session_id, sub = await hub.run(RunRequest(input=[text]))
        sub.close()
        await hub.wait_idle(session_id)
        before = [m async for m in await hub.history(session_id)]
        small_disk.remount("ro")
        try:
            with pytest.raises(StorageUnavailable, match="not deleted"):
                await hub.delete_session(session_id)
        finally:
            small_disk.remount("rw")
        assert session_id in [s.session_id for s in await hub.list_sessions()]
        assert [m async for m in await hub.history(session_id)] == before
        assert not (data / "deleting").exists() or list((data / "deleting").iterdir()) == []
        # Once the disk takes writes again, the delete goes through.
        await hub.delete_session(session_id)
        assert session_id not in [s.session_id for s in await hub.list_sessions()]
    finally:
        await hub.shutdown()
