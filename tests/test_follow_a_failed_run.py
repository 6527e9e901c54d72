"""Clients that stop at the task end still learn that the run failed (#22):
the disk fills during a run another client started, and ``omni-grpc
attach``, the Python client's ``attach(until_idle=True)`` and the SSE
client's ``read_reference(until_idle=True)`` each see ``request_end failed``
and the ``abort`` before the task's ``task_state idle``; the CLI exits 1.
A real server process on a real tmpfs."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Callable

import httpx
from conftest import ServeProcess
from small_disk import SmallDisk

from omni_grpc.client import AgentClient
from omni_grpc.client.sse import read_reference

ServeFactory = Callable[..., ServeProcess]


def omni(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "omni_grpc", *args],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip


async def python_kinds(target: str, session_id: str, joined: asyncio.Event) -> list[str]:
    kinds = []
    async with AgentClient(target) as client:
        async for event in client.attach(session_id, until_idle=True):
            kinds.append(event.kind)
            joined.set()  # the first event: the task state sent on subscribing
    return kinds


async def sse_kinds(base: str, session_id: str, joined: asyncio.Event) -> list[str]:
    kinds = []
    async with httpx.AsyncClient() as http:
        url = f"{base}/api/sessions/{session_id}/stream"
        async for item in read_reference(http, url, until_idle=True):
            joined.set()
            if item.message is not None:
                kinds.append(item.message.WhichOneof("payload"))
            else:
                kinds.append("@" + str(item.server_event_kind))
    return kinds


def test_followers_that_stop_at_the_task_end_see_the_failure(
    serve_process: ServeFactory, small_disk: SmallDisk
) -> None:
    served = serve_process(
        "--data-dir", str(small_disk.path / "data"), "--engine-opt", "repeat=200"
    )
    target = ["--target", served.grpc_address]
    # The task waits on its approval while the followers join it.
    session_id = omni("run", "fill it", *target, "--approve", "ask", "--detach").stdout.strip()
    cli = subprocess.Popen(
        [sys.executable, "-m", "omni_grpc", "attach", session_id, *target],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    assert cli.stderr is not None
    assert cli.stderr.readline().startswith("approval pending:")

    async def follow() -> tuple[list[str], list[str]]:
        joined = asyncio.Event(), asyncio.Event()
        py = asyncio.create_task(python_kinds(served.grpc_address, session_id, joined[0]))
        sse = asyncio.create_task(sse_kinds(f"http://{served.http_address}", session_id, joined[1]))
        async with asyncio.timeout(30):
            await asyncio.gather(joined[0].wait(), joined[1].wait())
        small_disk.leave(pages=2)  # the answer does not fit
        async with AgentClient(served.grpc_address) as client:
            await client.approve(session_id, "call_demo_1", "allow")
        async with asyncio.timeout(60):
            return await py, await sse

    py_kinds, sse = asyncio.run(follow())
    for kinds in (py_kinds, sse):
        assert kinds[-1] == "@task_state", kinds
        assert kinds[-3:-1] == ["request_end", "abort"], kinds
    out, err = cli.communicate(timeout=60)
    assert cli.returncode == 1, err
    assert "request failed: " in out and "trace could not be written" in out
    assert "aborted: " in out
