"""What an engine derives from a session's past comes from the session's
shared state (its trace), on any replica: runs of one session on several
replicas number their tool calls, announce their tools and total their
tokens as if one process had run them all.

Real parts: ``omni-grpc serve`` replicas on one redis-server and one data dir;
and, for the property, in-process hubs sharing one Redis and one data dir.
"""

from __future__ import annotations

import secrets
import shlex
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from conftest import ServeProcess
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis_server import RedisServer
from test_engine_command import SAME_ID_CHILD
from test_scale_out import OWNER_LOSS, read_until_idle, stub, trace_records, validate_records_of

from omni_grpc import protocol
from omni_grpc.convert import message_from_dict, message_to_dict
from omni_grpc.engines.base import Engine
from omni_grpc.engines.command import create as command_engine
from omni_grpc.engines.demo import DemoEngine
from omni_grpc.engines.replay import create as replay_engine
from omni_grpc.runtime.hub import Hub, RunRequest
from omni_grpc_proto.omni.v1 import agent_service_pb2 as pb

RECORDING = Path(__file__).parent / "conformance" / "trace_retry_auth_abort_001.jsonl"


def call_ids(records: list[dict[str, Any]]) -> list[str]:
    return [
        r["payload"]["tool_call_id"] for r in records if r["payload"].get("type") == "tool_call"
    ]


def without_times(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The payloads after session_meta: what two sessions' traces share
    (timestamps and the session's own id aside)."""
    assert "session_id" in records[0]["payload"]  # session_meta opens the trace
    return [r["payload"] for r in records[1:]]


async def test_runs_of_one_session_on_two_replicas_never_repeat_a_call_id(
    serve_process: Callable[..., ServeProcess], redis: RedisServer, tmp_path: Path
) -> None:
    data = tmp_path / "shared-data"
    a, b = (
        serve_process(
            "--redis-url", redis.url, "--data-dir", str(data),
            "--owner-loss-timeout", OWNER_LOSS, "--no-http",
        )
        for _ in range(2)
    )  # fmt: skip
    first = await read_until_idle(stub(a).Run(pb.RunRequest(prompt="one")))
    session_id = first[0].session_id  # type: ignore[attr-defined]
    for server, prompt in ((b, "two"), (a, "three"), (b, "four")):
        await read_until_idle(stub(server).Run(pb.RunRequest(session_id=session_id, prompt=prompt)))
    records = trace_records(data, session_id)
    assert call_ids(records) == [f"call_demo_{n}" for n in range(1, 5)]
    assert [r["payload"].get("type") for r in records].count("tool_list_ready") == 1
    totals = [
        r["payload"]["session"]["total"]
        for r in records
        if r["payload"].get("type") == "token_usage"
    ]
    assert totals == sorted(totals) and len(set(totals)) == len(totals)
    assert [i for i in validate_records_of(records) if i.severity == "error"] == []  # type: ignore[attr-defined]


async def _play(hubs: list[Hub], placement: list[int], prompts: list[str]) -> list[dict[str, Any]]:
    """The runs of one new session, run ``i`` on ``hubs[placement[i]]``."""
    session_id: str | None = None
    for where, prompt in zip(placement, prompts, strict=True):
        hub = hubs[where]
        text = message_from_dict(protocol.user_text(prompt))
        session_id, sub = await hub.run(RunRequest(input=[text], session_id=session_id))
        sub.close()
        await hub.wait_idle(session_id)
    assert session_id is not None
    return [message_to_dict(m) async for m in await hubs[0].history(session_id)]


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    placement=st.lists(st.integers(0, 2), min_size=2, max_size=5),
    engine=st.sampled_from(["demo", "replay", "command"]),
)
async def test_where_a_session_s_runs_land_does_not_change_its_trace(
    redis_server: RedisServer, placement: list[int], engine: str
) -> None:
    from omni_grpc.runtime.redis import redis_backend

    def make_engine() -> Engine:
        if engine == "demo":
            return DemoEngine()
        if engine == "command":  # ids from a child process, the same one every run
            return command_engine(f"command:{shlex.quote(sys.executable)} {shlex.quote(child)}")
        return replay_engine(f"replay:{RECORDING}", delay_ms="0")

    prefix = f"past-{secrets.token_hex(4)}:"
    with tempfile.TemporaryDirectory() as data:
        child = str(Path(data) / "same_id_child.py")
        Path(child).write_text(SAME_ID_CHILD)
        # Three replicas (one engine instance each) on one Redis and one data dir.
        hubs = [
            Hub(
                make_engine(),
                Path(data),
                backend=redis_backend(redis_server.url, prefix=prefix),
                replica_id=f"replica-{n}",
            )
            for n in range(3)
        ]
        try:
            prompts = [f"prompt {n}" for n in range(len(placement))]
            spread = await _play(hubs, placement, prompts)
            alone = await _play(hubs, [0] * len(placement), prompts)
        finally:
            for hub in hubs:
                await hub.shutdown()
                await hub.backend.aclose()
    # The same runs on one replica give the same trace, timestamps aside (and,
    # for ids renamed with a random suffix, which ones: see ``numbered``).
    assert numbered(without_times(spread)) == numbered(without_times(alone))
    ids = call_ids(spread)
    assert len(ids) == len(set(ids)) == len(placement if engine == "command" else ids)
    if engine == "command":  # the child says call_1 every time: its first use keeps it
        assert ids[0] == "call_1" and all(i.startswith("call_1_") for i in ids[1:])
    assert [i for i in validate_records_of(spread) if i.severity == "error"] == []  # type: ignore[attr-defined]


def numbered(payloads: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``payloads`` with each tool call id replaced by the order it first
    appears in: an id renamed to ``<id>_<8 random hex>`` (an engine that
    passes ids through, ``engines/call_ids.py``) differs from run to run,
    where it is used does not."""
    order: dict[str, str] = {}
    out = []
    for payload in payloads:
        call_id = payload.get("tool_call_id")
        if isinstance(call_id, str):
            payload = {**payload, "tool_call_id": order.setdefault(call_id, f"#{len(order)}")}
        out.append(payload)
    return out
