"""``grpc.health.v1.Health/Watch`` from real clients, while the status changes.

Watch used to fail every call with INTERNAL (an interceptor iterated the
coroutine with ``async for``). Here a grpcio client and buf curl watch a real
server whose data dir fills up and frees again, whose Redis is killed and
restarted, and which is stopped with SIGTERM: each watcher sees every change
as it happens.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
from collections.abc import Callable

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from redis_server import RedisServer
from small_disk import SmallDisk

from omni_grpc_proto.omni.v1 import agent_service_pb2 as pb
from omni_grpc_proto.omni.v1 import agent_service_pb2_grpc
from tests.conftest import ServeProcess, ServerFactory
from tests.test_grpc_security import BUF, _require_buf

WAIT = 60.0  # a safety net against hangs, never the thing a test checks
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


class Watcher:
    """One Watch call; ``next()`` is the next status the server sent."""

    def __init__(self, channel: grpc.aio.Channel, service: str = "") -> None:
        self.call = health_pb2_grpc.HealthStub(channel).Watch(
            health_pb2.HealthCheckRequest(service=service)
        )

    async def next(self) -> int:
        reply = await asyncio.wait_for(self.call.read(), WAIT)
        assert reply is not grpc.aio.EOF, "the Watch stream ended"
        return int(reply.status)

    async def end(self) -> grpc.StatusCode:
        """How the stream ends, after any statuses still to come."""
        try:
            while await asyncio.wait_for(self.call.read(), WAIT) is not grpc.aio.EOF:
                pass
        except grpc.aio.AioRpcError as exc:
            return exc.code()
        return await self.call.code()


async def _run(channel: grpc.aio.Channel, prompt: str, session_id: str = "") -> None:
    stub = agent_service_pb2_grpc.AgentServiceStub(channel)
    try:
        async for _ in stub.Run(pb.RunRequest(prompt=prompt, session_id=session_id)):
            pass
    except grpc.aio.AioRpcError:
        pass  # a run on a full disk fails; the watcher is what is checked


async def test_watch_follows_a_full_disk_and_its_recovery(
    server_factory: ServerFactory,
    small_disk: SmallDisk,
) -> None:
    server = await server_factory(
        data_dir=small_disk.path / "data", engine_options={"repeat": "60"}
    )
    assert server.grpc is not None
    async with grpc.aio.insecure_channel(server.grpc.address) as channel:
        watchers = [Watcher(channel), Watcher(channel, "omni.v1.AgentService")]
        assert [await w.next() for w in watchers] == [SERVING, SERVING]
        await _run(channel, "one")

        small_disk.fill()
        await _run(channel, "two")  # fails writing the trace
        assert [await w.next() for w in watchers] == [NOT_SERVING, NOT_SERVING]

        small_disk.free()
        await _run(channel, "three")
        assert [await w.next() for w in watchers] == [SERVING, SERVING]
        for w in watchers:
            w.call.cancel()


async def test_watch_follows_the_loss_of_redis_and_its_return(
    serve_process: Callable[..., ServeProcess], redis: RedisServer
) -> None:
    server = serve_process("--redis-url", redis.url, "--no-http")
    async with grpc.aio.insecure_channel(server.grpc_address) as channel:
        watcher = Watcher(channel)
        assert await watcher.next() == SERVING
        redis.kill()
        assert await watcher.next() == NOT_SERVING
        redis.start()  # same port, same AOF
        assert await watcher.next() == SERVING
        watcher.call.cancel()


async def test_watch_sees_not_serving_when_the_server_stops(
    serve_process: Callable[..., ServeProcess],
) -> None:
    server = serve_process("--no-http")
    async with grpc.aio.insecure_channel(server.grpc_address) as channel:
        watcher = Watcher(channel)
        assert await watcher.next() == SERVING
        server.process.send_signal(signal.SIGTERM)
        assert await watcher.next() == NOT_SERVING
        assert await watcher.end() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)
    assert await asyncio.to_thread(server.process.wait, WAIT) == 0


async def test_buf_curl_watches_over_reflection(
    serve_process: Callable[..., ServeProcess],
) -> None:
    _require_buf()
    server = serve_process("--no-http")
    watch = subprocess.Popen(
        [str(BUF), "curl", "--protocol", "grpc", "--http2-prior-knowledge",
         "--data", "{}", f"http://{server.grpc_address}/grpc.health.v1.Health/Watch"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert watch.stdout is not None
        first = await asyncio.wait_for(asyncio.to_thread(_document, watch.stdout), WAIT)
        assert first == {"status": "SERVING"}
        server.process.send_signal(signal.SIGTERM)
        second = await asyncio.wait_for(asyncio.to_thread(_document, watch.stdout), WAIT)
        assert second == {"status": "NOT_SERVING"}
    finally:
        watch.kill()
        watch.wait()
    assert "Internal" not in (watch.stderr.read() if watch.stderr else "")


def _document(stream: object) -> object:
    """The next JSON document buf curl printed (it pretty-prints one per message)."""
    text = ""
    decoder = json.JSONDecoder()
    for line in stream:  # type: ignore[attr-defined]
        text += line
        try:
            document, _ = decoder.raw_decode(text.strip())
        except ValueError:
            continue
        return document
    raise AssertionError(f"buf curl ended: {text!r}")
