"""docs/deployment.md followed literally: three replicas behind its nginx on
its Redis, then a replica killed mid-run and Redis restarted.

What is taken from the guide as written: the Redis settings block (plus the
``maxmemory`` it says to set), the ``omni-grpc serve`` command of "Running a
replica" with the full ``--allowed-host`` list it says to give, and the nginx
site file (``tests/nginx_front.py``). Only what names this machine is
replaced, as the nginx test does: addresses and ports, paths, the token. The
demo engine is paced so a run lasts long enough to kill its replica.

The clients do what the guide says a client does: they resume with their last
event id on INTERNAL, UNAVAILABLE or UNKNOWN (the codes nginx produces when
an upstream dies), 0.25 s doubling up to 4 s apart, giving up after 8
attempts in a row with no new event.
"""

from __future__ import annotations

import asyncio
import re
import shlex
import signal
import ssl
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from nginx_front import Nginx, make_certs, require_nginx, site_config
from redis_server import RedisServer, free_port, require_redis

from omni_grpc.client import AgentClient
from omni_grpc.client.errors import AgentError
from omni_grpc.client.events import StreamEvent
from omni_grpc.runtime.resumption import RESUMED_REASON
from omni_grpc_proto.omni.v1 import agent_service_pb2 as pb

GUIDE = Path(__file__).parent.parent / "docs" / "deployment.md"
WAIT = 120.0  # a safety net against hangs, never the thing a test checks
TOKEN = "guide-test-token"
RESUME_ON = {grpc.StatusCode.INTERNAL, grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNKNOWN}


def guide_section(title: str) -> str:
    text = GUIDE.read_text()
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else len(text)]


def redis_settings() -> list[str]:
    """The guide's Redis settings block as redis-server arguments, and the
    ``maxmemory`` it says to set."""
    section = guide_section("Redis settings")
    block = re.search(r"```\n(.*?)```", section, re.S)
    assert block is not None
    args = []
    for line in block.group(1).splitlines():
        name, value = line.split("#", 1)[0].split()
        args += [f"--{name}", value]
    assert "--maxmemory-policy" in args and "noeviction" in args
    assert "Set `maxmemory`" in section
    return [*args, "--maxmemory", "512mb"]


def serve_command() -> list[str]:
    """The guide's ``omni-grpc serve`` command, its continuation lines joined."""
    section = guide_section("Running a replica")
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block is not None
    lines = [line for line in block.group(1).splitlines() if not line.startswith("#")]
    words = shlex.split(" ".join(line.rstrip("\\") for line in lines))
    assert words[:2] == ["omni-grpc", "serve"], words
    return words


@dataclass
class GuideRedis(RedisServer):
    """redis-server with the guide's settings (restarted on the same AOF)."""

    def start(self) -> None:
        binary = require_redis()
        self.directory.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1",
             "--dir", str(self.directory), "--save", "", "--protected-mode", "no",
             "--logfile", str(self.directory / "redis.log"), *redis_settings()],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        self._wait_ready()


@dataclass
class Replica:
    process: subprocess.Popen[str]
    grpc_address: str
    http_address: str


def start_replica(redis_url: str, data: Path, token_file: Path, log: Path) -> Replica:
    grpc_port, http_port = free_port(), free_port()
    replaced = {
        "--host": "127.0.0.1",  # the guide's 0.0.0.0, not opened to the network here
        "--grpc-port": str(grpc_port),
        "--http-port": str(http_port),
        "--redis-url": redis_url,
        "--data-dir": str(data),
        "--auth-token-file": str(token_file),
    }
    words = serve_command()
    args = [replaced.get(words[i - 1], word) for i, word in enumerate(words) if i >= 2]
    # The full list the guide says to give, with this replica's own address.
    for name in ("localhost", "127.0.0.1"):
        args += ["--allowed-host", name]
    args += ["--pacing", "0.1"]  # the engine configuration is the operator's
    process = subprocess.Popen(
        [sys.executable, "-m", "omni_grpc", "serve", *args],
        stdout=subprocess.PIPE, stderr=log.open("w"), text=True,
    )  # fmt: skip
    assert process.stdout is not None
    for line in process.stdout:
        if line.strip() == "omni-grpc ready":
            return Replica(process, f"127.0.0.1:{grpc_port}", f"127.0.0.1:{http_port}")
    raise AssertionError(f"serve exited ({process.wait()}): {log.read_text()[-2000:]}")


@dataclass
class Deployment:
    redis: GuideRedis
    replicas: list[Replica]
    nginx: Nginx
    ca: bytes

    @property
    def target(self) -> str:
        return f"localhost:{self.nginx.port}"


@pytest.fixture
def deployment(tmp_path: Path) -> Iterator[Deployment]:
    require_nginx()
    redis = GuideRedis(tmp_path / "redis")
    redis.start()
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    token_file.chmod(0o600)
    replicas: list[Replica] = []
    nginx: Nginx | None = None
    try:
        for n in range(3):
            replicas.append(
                start_replica(redis.url, tmp_path / "data", token_file, tmp_path / f"r{n}.log")
            )
        certs = tmp_path / "certs"
        certs.mkdir()
        make_certs(certs)
        port = free_port()
        site = site_config(
            [r.grpc_address for r in replicas], [r.http_address for r in replicas], port, certs
        )
        nginx = Nginx(tmp_path / "nginx", site, port)
        nginx.start()
        yield Deployment(redis, replicas, nginx, (certs / "ca.pem").read_bytes())
    finally:
        if nginx is not None:
            nginx.stop()
        for replica in replicas:
            if replica.process.poll() is None:
                replica.process.terminate()
                try:
                    replica.process.wait(15)
                except subprocess.TimeoutExpired:
                    replica.process.kill()
                    replica.process.wait()
        redis.stop()


async def resuming(
    client: AgentClient,
    first: AsyncIterator[StreamEvent],
    session: list[str],
    resumed: list[grpc.StatusCode] | None = None,
) -> AsyncIterator[StreamEvent]:
    """The guide's client loop: the stream, then re-attaches with the last
    event id on the codes a proxy produces, until the task's end (each
    code it resumed on goes in ``resumed``)."""
    stream, last, tries, delay = first, "", 0, 0.25
    while True:
        try:
            async for event in stream:
                tries, delay = 0, 0.25
                if event.event_id:
                    last = event.event_id
                yield event
                if event.is_task_end:
                    return
            return
        except AgentError as exc:
            if exc.code not in RESUME_ON or tries >= 8:
                raise
            if resumed is not None:
                resumed.append(exc.code)
            tries += 1
            await asyncio.sleep(delay)  # the guide's backoff between attempts
            delay = min(delay * 2, 4.0)
            stream = client.attach(session[0], last or None)


def metric(replica: Replica, name: str) -> float:
    text = httpx.get(
        f"http://{replica.http_address}/metrics",
        headers={"authorization": f"Bearer {TOKEN}"},
        timeout=10,
    ).text
    for line in text.splitlines():
        if line.startswith(f"{name} "):
            return float(line.split()[1])
    raise AssertionError(f"no {name} on {replica.http_address}")


async def health(address: str) -> int:
    async with grpc.aio.insecure_channel(address) as channel:
        reply = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
        return reply.status


async def until_health(replicas: list[Replica], status: int) -> None:
    while [await health(r.grpc_address) for r in replicas] != [status] * len(replicas):
        await asyncio.sleep(0.1)  # polling a condition


def ids_once(events: list[StreamEvent]) -> list[str]:
    ids = [e.event_id for e in events if e.event_id]
    assert len(ids) == len(set(ids)), ids  # every event exactly once
    return ids


async def test_the_guide_followed_literally_survives_a_replica_kill_and_a_redis_restart(
    deployment: Deployment,
) -> None:
    replicas = deployment.replicas
    async with AgentClient(deployment.target, token=TOKEN, tls_ca=deployment.ca) as client:
        # Through nginx: a run read to its end, and the HTTP side by the
        # name clients type (the guide's --allowed-host).
        events = [e async for e in client.run("hello through the guide")]
        assert events[-1].is_task_end
        context = ssl.create_default_context(cadata=deployment.ca.decode())
        async with httpx.AsyncClient(
            base_url=f"https://{deployment.target}", verify=context
        ) as http:
            listed = await http.get(
                "/api/sessions",
                headers={"host": "agent.example.com", "authorization": f"Bearer {TOKEN}"},
            )
            assert listed.status_code == 200, listed.text

        # A replica killed mid-run: the client resumes through nginx and sees
        # every event once, then the take-over's close.
        session: list[str] = []
        run = client.run("a run whose replica dies")
        seen: list[StreamEvent] = []

        async def first_events() -> AsyncIterator[StreamEvent]:
            async for event in run:
                if not session:
                    session.append(event.session_id)
                yield event

        resumed: list[grpc.StatusCode] = []
        stream = resuming(client, first_events(), session, resumed)
        seen.append(await asyncio.wait_for(anext(stream), WAIT))
        owners = [r for r in replicas if metric(r, "omni_runs_in_progress") > 0]
        assert len(owners) == 1, [metric(r, "omni_runs_in_progress") for r in replicas]
        owners[0].process.send_signal(signal.SIGKILL)
        owners[0].process.wait(30)

        async def rest() -> None:
            async for event in stream:
                seen.append(event)

        await asyncio.wait_for(rest(), WAIT)
        # The stream through nginx broke with a code the guide lists (nginx's
        # reset is INTERNAL), and the client went on from its last event.
        assert resumed and set(resumed) <= RESUME_ON, resumed
        ids_once(seen)
        assert seen[-1].is_task_end
        # The guide's replicas resume runs (#41): the take-over marks the
        # interruption and the task goes on to its end, with no abort.
        assert [e for e in seen if e.kind == "abort"] == [], [e.kind for e in seen]
        marks = [
            e
            for e in seen
            if e.message is not None
            and e.message.HasField("request_end")
            and e.message.request_end.error_message == RESUMED_REASON
        ]
        assert len(marks) == 1, [e.kind for e in seen]
        live = [r for r in replicas if r is not owners[0]]

        # Redis killed and started again on its AOF, with the guide's
        # settings: health goes NOT_SERVING and back, and nothing is lost.
        history_before = [m.SerializeToString() async for m in client.history(session[0])]
        deployment.redis.kill()
        await asyncio.wait_for(until_health(live, health_pb2.HealthCheckResponse.NOT_SERVING), WAIT)
        deployment.redis.start()
        await asyncio.wait_for(until_health(live, health_pb2.HealthCheckResponse.SERVING), WAIT)
        history_after = [m.SerializeToString() async for m in client.history(session[0])]
        assert history_after == history_before
        # The same session takes a new run after it all, through nginx (a
        # run refused before it started is the client's to send again).
        again: list[StreamEvent] = []
        for attempt in range(8):
            try:
                async for event in resuming(
                    client, client.run("again", session_id=session[0]), session
                ):
                    again.append(event)
                break
            except AgentError as exc:
                if again or exc.code != grpc.StatusCode.UNAVAILABLE or attempt == 7:
                    raise
                await asyncio.sleep(0.25 * 2**attempt)  # the guide's backoff
        ids_once(again)
        assert again[-1].is_task_end
        assert not [e for e in again if e.kind == "abort"]
        infos = {s.session_id: s for s in await client.list_sessions()}
        assert infos[session[0]].state == pb.SESSION_STATE_IDLE
