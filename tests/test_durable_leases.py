"""A run that ends for any reason releases its run lease in the same step:
a run whose claim (or the step after it) was cut off from Redis leaves no
lease behind, so the session's next run is accepted at once, and nothing is
written into the session for the run that never started.

Real parts: a redis-server, an ``omni-grpc serve`` replica whose link to it
goes through a forwarder the test cuts right after a given command reached
Redis (Redis ran it; the replica never heard back).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
from conftest import ServeProcess
from fakes.redis_link import RedisLink
from redis_server import RedisServer
from test_scale_out import (
    OWNER_LOSS,
    WAIT,
    read_until_idle,
    stub,
    trace_records,
    validate_records_of,
)

from omni_grpc.runtime.redis import scripts
from omni_grpc_proto.omni.v1 import agent_service_pb2 as pb


async def read_until(call: object, event_id: str) -> list[pb.AttachResponse]:
    """Everything the call yields up to and including ``event_id``."""
    out: list[pb.AttachResponse] = []

    async def read() -> None:
        async for response in call:  # type: ignore[attr-defined]
            out.append(response)
            if response.event_id == event_id:
                return
        raise AssertionError(f"the stream ended before {event_id}")

    await asyncio.wait_for(read(), WAIT)
    return out


def sha(script: str) -> bytes:
    # redis-py sends EVALSHA with the script's SHA-1 once the script is loaded.
    return hashlib.sha1(script.encode()).hexdigest().encode()


@pytest.fixture
def link(redis: RedisServer) -> Iterator[RedisLink]:
    forwarder = RedisLink(redis.port)
    forwarder.start()
    yield forwarder
    forwarder.stop()


@pytest.mark.parametrize("cut_at", ["ACQUIRE", "SUBSCRIBE"])
async def test_a_run_cut_off_after_its_claim_leaves_no_lease_behind(
    serve_process: Callable[..., ServeProcess], link: RedisLink, tmp_path: Path, cut_at: str
) -> None:
    data = tmp_path / "data"
    a = serve_process(
        "--redis-url", link.url, "--data-dir", str(data),
        "--owner-loss-timeout", OWNER_LOSS, "--no-http",
    )  # fmt: skip
    first = await read_until_idle(stub(a).Run(pb.RunRequest(prompt="one")))
    session_id = first[0].session_id  # type: ignore[attr-defined]
    # The claim (or the subscription right after it) reaches Redis; its reply never comes back.
    link.cut_after(sha(getattr(scripts, cut_at)))
    with pytest.raises(grpc.aio.AioRpcError) as cut:
        await read_until_idle(stub(a).Run(pb.RunRequest(session_id=session_id, prompt="cut")))
    assert cut.value.code() == grpc.StatusCode.UNAVAILABLE
    assert link.cuts == 1
    # The next run is taken at once (not ABORTED "busy" until a sweep).
    again = await read_until_idle(stub(a).Run(pb.RunRequest(session_id=session_id, prompt="again")))
    assert again[-1].event.task_state.state == pb.SESSION_STATE_IDLE  # type: ignore[attr-defined]
    # Nothing of the run that never started: no abort, no second idle.
    records = trace_records(data, session_id)
    texts = [r["payload"].get("text") for r in records if r["payload"].get("type") == "text"]  # type: ignore[union-attr]
    assert "cut" not in texts
    assert [r for r in records if r["payload"].get("type") == "abort"] == []  # type: ignore[union-attr]
    assert [i for i in validate_records_of(records) if i.severity == "error"] == []  # type: ignore[attr-defined]
    log = await read_until(
        stub(a).Attach(pb.AttachRequest(session_id=session_id, after_event_id=first[0].event_id)),  # type: ignore[attr-defined]
        again[-1].event_id,  # type: ignore[attr-defined]
    )
    assert [
        r for r in log if r.WhichOneof("kind") == "message" and r.message.HasField("abort")
    ] == []  # type: ignore[attr-defined]
