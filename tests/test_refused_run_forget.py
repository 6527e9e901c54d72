"""A Run refused after its session was made takes the session back out even
when the index cannot answer at that moment (#29: under load the Redis pool's
wait ran out, and the refused Run's session stayed listed). The removal is
asked again until the index answers."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from omni_grpc import protocol
from omni_grpc.convert import message_from_dict
from omni_grpc.engines.demo import DemoEngine
from omni_grpc.runtime.errors import BackendUnavailable
from omni_grpc.runtime.hub import Hub, RunRequest
from omni_grpc.runtime.run_lease import Lease

WAIT = 60.0  # bounds a hang only


async def test_a_refused_runs_session_is_removed_once_the_index_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hub = Hub(DemoEngine(), tmp_path / "data")
    await hub.start()
    index = hub.backend.index
    refusals = 0

    async def no_claim(session_id: str, owner: str) -> Lease | None:
        raise BackendUnavailable("no connection available")

    remove = index.remove

    async def remove_after_two_refusals(session_id: str) -> bool:
        nonlocal refusals
        if refusals < 2:
            refusals += 1
            raise BackendUnavailable("no connection available")
        return await remove(session_id)

    monkeypatch.setattr(hub.backend.leases, "acquire", no_claim)
    monkeypatch.setattr(index, "remove", remove_after_two_refusals)
    try:
        with pytest.raises(BackendUnavailable):
            await hub.run(RunRequest(input=[message_from_dict(protocol.user_text("hi"))]))

        async def none_listed() -> None:
            while await hub.list_sessions():
                await asyncio.sleep(0.02)  # polling a condition

        await asyncio.wait_for(none_listed(), WAIT)
        assert refusals == 2
        assert not list((tmp_path / "data" / "workspaces").glob("*"))
    finally:
        await hub.shutdown()
