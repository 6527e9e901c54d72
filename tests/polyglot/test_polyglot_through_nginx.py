"""The Go and Node example clients resume through nginx when a replica dies.

Three real replicas on one redis-server behind the guide's nginx config; the
client runs a prompt through nginx over TLS, and the replica serving its Run
call is killed (SIGKILL) mid-run. nginx then resets the stream (RST_STREAM
INTERNAL_ERROR, which gRPC clients report as INTERNAL, not UNAVAILABLE): the
client must re-attach with its last event id through nginx, reach another
replica, and get every event of the session's log exactly once, up to the
close another replica writes for the dead one.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
from conftest import ServeProcess
from nginx_front import Nginx, make_certs, require_nginx, runs_in_progress, site_config
from redis_server import RedisServer, free_port

from omni_grpc_proto.omni.v1 import agent_service_pb2 as pb
from omni_grpc_proto.omni.v1 import agent_service_pb2_grpc as pb_grpc
from polyglot.polyglot_builds import build_go, build_node

OWNER_LOSS = "2"  # seconds: how soon another replica closes the dead one's run
PROMPT = " ".join(f"word{i}" for i in range(40))  # long enough to be cut mid-run
WAIT = 90.0


class Front:
    def __init__(self, port: int, certs: Path, replicas: list[ServeProcess]) -> None:
        self.port, self.certs, self.replicas = port, certs, replicas


@pytest.fixture
def front(serve_process: Callable[..., ServeProcess], tmp_path: Path) -> Iterator[Front]:
    require_nginx()
    redis = RedisServer(tmp_path / "redis")
    redis.start()
    replicas = [
        serve_process(
            "--redis-url", redis.url, "--data-dir", str(tmp_path / "data"),
            "--pacing", "0.1", "--owner-loss-timeout", OWNER_LOSS,
        )
        for _ in range(3)
    ]  # fmt: skip
    certs = tmp_path / "certs"
    certs.mkdir()
    make_certs(certs)
    port = free_port()
    site = site_config(
        [r.grpc_address for r in replicas], [r.http_address or "" for r in replicas], port, certs
    )
    nginx = Nginx(tmp_path / "nginx", site, port)
    try:
        nginx.start()
        yield Front(port, certs, replicas)
    finally:
        nginx.stop()
        redis.stop()


def is_idle(response: pb.AttachResponse) -> bool:
    return (
        response.WhichOneof("kind") == "event"
        and response.event.WhichOneof("kind") == "task_state"
        and response.event.task_state.state == pb.SESSION_STATE_IDLE
    )


async def whole_log(address: str, session_id: str, epoch: str) -> list[pb.AttachResponse]:
    """Every kept event of the session, replayed from its first: up to the
    Attach's own (unicast) task_state, which follows the log's closing idle."""
    out: list[pb.AttachResponse] = []
    async with grpc.aio.insecure_channel(address) as channel:
        call = pb_grpc.AgentServiceStub(channel).Attach(
            pb.AttachRequest(session_id=session_id, after_event_id=f"{epoch}-0")
        )

        async def read() -> None:
            async for response in call:
                out.append(response)
                if len(out) > 1 and is_idle(response) and is_idle(out[-2]):
                    return

        await asyncio.wait_for(read(), WAIT)
        call.cancel()
    return out[:-1]


@pytest.mark.parametrize("language", ["go", "node"])
async def test_a_client_resumes_through_nginx_when_its_replica_dies(
    front: Front, language: str
) -> None:
    client = [str(build_go().client)] if language == "go" else build_node()
    proc = subprocess.Popen(
        [*client, "run", "--addr", f"localhost:{front.port}",
         "--tls-ca", str(front.certs / "ca.pem"), "--print-ids", PROMPT],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    errors: list[str] = []
    drain = threading.Thread(target=lambda: errors.extend(proc.stderr or []), daemon=True)
    drain.start()
    seen: list[tuple[str, str]] = []
    for line in proc.stdout:
        event_id, kind = line.split()
        seen.append((event_id, kind))
        if len(seen) == 5:
            break
    assert len(seen) == 5, "".join(errors)
    # The replica running the task is the one serving the Run call.
    [serving] = [r for r in front.replicas if runs_in_progress(r.http_address or "") > 0]
    serving.process.send_signal(signal.SIGKILL)
    serving.process.wait(30)
    for line in proc.stdout:
        event_id, kind = line.split()
        seen.append((event_id, kind))
    assert proc.wait(WAIT) == 0, "".join(errors)
    drain.join(WAIT)
    log = "".join(errors)
    # nginx reported the loss as INTERNAL (its RST_STREAM), and the client resumed.
    assert "[reconnect] attach after " in log, log
    assert "INTERNAL" in log.upper(), log
    session_id = next(line.split()[1] for line in errors if line.startswith("[session] "))
    live = next(r for r in front.replicas if r is not serving)
    epoch = seen[0][0].rsplit("-", 1)[0]
    kept = [r.event_id for r in await whole_log(live.grpc_address, session_id, epoch)]
    ids = [event_id for event_id, _ in seen]
    # Every kept event once, in order; the only others are each Attach's own
    # task_state (unicast: an id that is never kept).
    assert [i for i in ids if i in set(kept)] == kept
    assert len(set(ids)) == len(ids)
    assert all(kind == "event" for i, kind in seen if i not in set(kept))
    # The dead replica's run was closed by another one, and the client saw it.
    assert kept[-1] == ids[-1]
