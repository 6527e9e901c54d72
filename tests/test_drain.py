"""Graceful drain with real ``omni-grpc serve`` processes.

On SIGTERM a server refuses new runs (UNAVAILABLE, HTTP 503, health
NOT_SERVING) and lets the running ones finish, approvals still answered and
streams still served, for ``--drain-timeout`` seconds; then it aborts what is
left and exits 0. A second SIGTERM or SIGINT stops it at once. Behind Redis,
another replica serves the draining one's sessions.

The bounds (docs/deployment.md, "Draining"): a process is gone at most
``drain timeout + shutdown grace + FORCE_SLACK`` after the first signal and
``SECOND_SIGNAL_BUDGET + FORCE_SLACK`` after a second, with Watch and
reflection streams open, with runs waiting on approval, beside CPU-bound
processes, and with its event loop blocked for good.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import grpc
import httpx
import pytest
from conftest import ServeProcess
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from redis_server import RedisServer
from waiting import wait_for

from omni_grpc.cli.stop_signals import EXIT_FORCED, FORCE_SLACK, SECOND_SIGNAL_BUDGET
from omni_grpc.trace import read_jsonl

ServeFactory = Callable[..., ServeProcess]


def omni(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "omni_grpc", *args],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def records(data: Path, session_id: str) -> list[dict[str, object]]:
    from omni_grpc.convert import message_to_dict

    shards = sorted(data.glob(f"traces/*/{session_id}_*.jsonl"))
    return (
        [message_to_dict(r.message) for r in read_jsonl(shards[-1], tolerant=True)]
        if shards
        else []
    )


def kinds(data: Path, session_id: str) -> list[str]:
    return [str(r["payload"].get("type", r["type"])) for r in records(data, session_id)]  # type: ignore[attr-defined]


def pending_run(served: ServeProcess, data: Path) -> str:
    """A detached run waiting for its approval."""
    detached = omni(
        "run", "hold on", "--target", served.grpc_address, "--approve", "ask", "--detach"
    )
    assert detached.returncode == 0, detached.stderr
    session_id = detached.stdout.strip()
    wait_for(lambda: kinds(data, session_id)[-1:] == ["tool_call"], "the run did not ask")
    return session_id


def signal_and_wait_for_drain(served: ServeProcess, sig: signal.Signals = signal.SIGTERM) -> str:
    served.process.send_signal(sig)
    assert served.process.stdout is not None
    for line in served.process.stdout:
        if line.startswith("omni-grpc draining"):
            return line
    raise AssertionError(f"no draining line; exit {served.process.wait()}")


def health(address: str) -> int:
    with grpc.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        return int(stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=10).status)


def test_sigterm_drains_the_running_task_then_exits_0(
    serve_process: ServeFactory, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    served = serve_process("--data-dir", str(data))
    session_id = pending_run(served, data)
    line = signal_and_wait_for_drain(served)
    assert "1 running" in line and "30 s" in line

    # New work is refused, everywhere, with the status load balancers read.
    refused = omni("run", "new", "--target", served.grpc_address)
    assert refused.returncode == 3 and "UNAVAILABLE" in refused.stderr, refused.stderr
    assert health(served.grpc_address) == health_pb2.HealthCheckResponse.NOT_SERVING
    assert served.http_address is not None
    base = f"http://{served.http_address}"
    healthz = httpx.get(f"{base}/healthz")
    assert healthz.status_code == 503 and "draining" in healthz.json()["problems"]
    # A draining server closes each connection after its response, and says so:
    # a client's next request goes on a new connection (to another replica).
    assert healthz.headers["connection"] == "close"
    assert httpx.post(f"{base}/v1/runs", json={"prompt": "new"}).status_code == 503
    assert httpx.post(f"{base}/api/sessions", json={}).status_code == 503

    # The running task is still served: its history, and its approval.
    assert omni("history", session_id, "--target", served.grpc_address).returncode == 0
    approved = omni("approve", session_id, "call_demo_1", "allow", "--target", served.grpc_address)
    assert approved.returncode == 0, approved.stderr
    # It finishes, and the server exits 0 on its own: nothing was aborted.
    assert served.process.wait(60) == 0
    done = kinds(data, session_id)
    assert "abort" not in done and done[-1] == "request_end"
    assert records(data, session_id)[-1]["payload"]["status"] == "completed"  # type: ignore[index]


def test_what_is_left_after_the_drain_timeout_is_aborted_and_the_exit_is_0(
    serve_process: ServeFactory, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    # Resumption off: the run is aborted, not handed over (see below).
    served = serve_process("--data-dir", str(data), "--drain-timeout", "0.5", "--resume-runs", "0")
    session_id = pending_run(served, data)
    signal_and_wait_for_drain(served)
    assert served.process.wait(60) == 0
    assert served.process.stdout is not None
    said = served.process.stdout.read()
    assert "stopping 1 unfinished run(s) after the drain timeout" in said
    last = records(data, session_id)
    assert last[-1]["payload"] == {"type": "abort", "reason": "server shutting down"}
    outputs = [r["payload"] for r in last if r["payload"].get("type") == "tool_call_output"]  # type: ignore[attr-defined]
    assert [o["output"] for o in outputs] == ["Tool call not run: server shutting down."]  # type: ignore[index]


def test_a_drain_that_runs_out_hands_the_run_over_and_the_next_start_asks_again(
    serve_process: ServeFactory, tmp_path: Path
) -> None:
    """With resumption on (the default), what is left after the drain timeout
    is not aborted: the trace is left as a lost process leaves it, and the
    server started again on the data dir resumes the task, whose approval
    is asked again (the call the drain interrupted never ran)."""
    data = tmp_path / "data"
    served = serve_process("--data-dir", str(data), "--drain-timeout", "0.5")
    session_id = pending_run(served, data)
    signal_and_wait_for_drain(served)
    assert served.process.wait(60) == 0
    assert "abort" not in kinds(data, session_id)
    again = serve_process("--data-dir", str(data))
    # Resumed: the interruption marked, the turn played again up to its ask.
    wait_for(
        lambda: (
            kinds(data, session_id)[-1:] == ["tool_call"]
            and kinds(data, session_id).count("tool_call") == 2
        ),
        "the run was not resumed",
    )
    last = records(data, session_id)
    assert "abort" not in kinds(data, session_id)
    calls = [r["payload"]["tool_call_id"] for r in last if r["payload"].get("type") == "tool_call"]  # type: ignore[index,union-attr]
    assert calls == ["call_demo_1", "call_demo_2"]
    outputs = [r["payload"] for r in last if r["payload"].get("type") == "tool_call_output"]  # type: ignore[union-attr]
    # The first call never ran: it was answered as not run, once.
    assert [o["tool_call_id"] for o in outputs] == ["call_demo_1"]  # type: ignore[index]
    assert outputs[0]["stop_reason"] == "aborted"  # type: ignore[index]
    assert again.process.poll() is None


@pytest.mark.parametrize("second", [signal.SIGTERM, signal.SIGINT])
def test_a_second_signal_stops_at_once(
    serve_process: ServeFactory, tmp_path: Path, second: signal.Signals
) -> None:
    data = tmp_path / "data"
    served = serve_process("--data-dir", str(data), "--drain-timeout", "3600", "--resume-runs", "0")
    session_id = pending_run(served, data)
    signal_and_wait_for_drain(served)
    served.process.send_signal(second)
    # Far inside the drain timeout: the second signal ended the wait.
    assert served.process.wait(60) == 0
    assert served.process.stdout is not None
    assert "after a second signal" in served.process.stdout.read()
    assert kinds(data, session_id)[-1] == "abort"


def test_behind_redis_another_replica_serves_the_draining_ones_sessions(
    serve_process: ServeFactory, redis: RedisServer, tmp_path: Path
) -> None:
    data = tmp_path / "shared"
    shared = ["--data-dir", str(data), "--redis-url", redis.url]
    draining, other = serve_process(*shared), serve_process(*shared)
    session_id = pending_run(draining, data)
    signal_and_wait_for_drain(draining)
    refused = omni("run", "new", "--target", draining.grpc_address)
    assert refused.returncode == 3 and "UNAVAILABLE" in refused.stderr

    # The other replica shows the run, answers its approval, and the
    # draining replica finishes it before it exits.
    target = ["--target", other.grpc_address]
    [row] = omni("sessions", *target).stdout.splitlines()[1:]
    assert row.split()[:2] == [session_id, "running"]
    approved = omni("approve", session_id, "call_demo_1", "allow", *target)
    assert approved.returncode == 0, approved.stderr
    assert draining.process.wait(60) == 0
    assert "abort" not in kinds(data, session_id)
    # The session goes on on the replica still serving.
    again = omni("run", "and now?", "--session", session_id, *target, "--json")
    assert again.returncode == 0, again.stderr
    assert kinds(data, session_id)[-1] == "request_end"


# ---- the bounds -------------------------------------------------------------------

ROOT = Path(__file__).resolve().parent.parent
# Between a process's exit and the test's wait() seeing it: the only slack a
# bound gets here, since the bound is what the process itself must keep.
REAPED = 1.0


@contextlib.contextmanager
def cpu_bound_processes(count: int = 4) -> Iterator[None]:
    """``count`` processes spinning on the CPU (the machine has 2 cores)."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


def exit_after(served: ServeProcess, start: float, limit: float = 120) -> tuple[int, float]:
    """The exit status, and the seconds from ``start`` to the exit."""
    code = served.process.wait(limit)
    return code, time.monotonic() - start


class Streams:
    """Health.Watch and reflection calls held open on one channel, as gRPC
    clients with client-side health checking and grpcurl hold them."""

    def __init__(self, channel: grpc.aio.Channel, watches: int, reflections: int) -> None:
        health_stub = health_pb2_grpc.HealthStub(channel)
        self.watches = [health_stub.Watch(health_pb2.HealthCheckRequest()) for _ in range(watches)]
        self._requests: asyncio.Queue[reflection_pb2.ServerReflectionRequest] = asyncio.Queue()
        reflection = reflection_pb2_grpc.ServerReflectionStub(channel)
        self.reflections = [
            reflection.ServerReflectionInfo(self._feed()) for _ in range(reflections)
        ]

    async def _feed(self) -> AsyncIterator[reflection_pb2.ServerReflectionRequest]:
        while True:
            yield await self._requests.get()

    async def opened(self) -> None:
        for watch in self.watches:
            assert (await watch.read()).status == health_pb2.HealthCheckResponse.SERVING
        for reflection in self.reflections:
            await self._requests.put(reflection_pb2.ServerReflectionRequest(list_services=""))
            reply = await reflection.read()
            assert reply.list_services_response.service, reply

    @staticmethod
    async def ending(call: grpc.aio.Call) -> tuple[list[int], grpc.StatusCode]:
        """What a call still sent (statuses, for a Watch) and how it ended."""
        sent: list[int] = []
        try:
            while (reply := await asyncio.wait_for(call.read(), 60)) is not grpc.aio.EOF:  # type: ignore[attr-defined]
                if isinstance(reply, health_pb2.HealthCheckResponse):
                    sent.append(int(reply.status))
        except grpc.aio.AioRpcError as exc:
            return sent, exc.code()
        return sent, await call.code()  # type: ignore[attr-defined]


async def test_watch_and_reflection_streams_end_as_the_stop_begins_quietly(
    serve_process: ServeFactory,
) -> None:
    """They used to hold the stop for its whole grace, then end cancelled."""
    grace = 30.0
    served = serve_process("--shutdown-grace", str(grace), "--log-level", "info")
    async with grpc.aio.insecure_channel(served.grpc_address) as channel:
        streams = Streams(channel, watches=4, reflections=2)
        await streams.opened()
        # Streams their clients cancel end quietly too.
        streams.watches[0].cancel()
        streams.reflections[0].cancel()
        start = time.monotonic()
        served.process.send_signal(signal.SIGTERM)
        for watch in streams.watches[1:]:
            sent, code = await Streams.ending(watch)
            assert sent == [health_pb2.HealthCheckResponse.NOT_SERVING], sent
            assert code == grpc.StatusCode.UNAVAILABLE
        _, code = await Streams.ending(streams.reflections[1])
        assert code == grpc.StatusCode.UNAVAILABLE
        status, took = await asyncio.to_thread(exit_after, served, start)
    assert status == 0
    # Nothing ran, so nothing had to wait for the grace.
    assert took < grace / 3, took
    assert served.process.stderr is not None
    said = served.process.stderr.read()
    assert "Traceback" not in said and "ERROR" not in said, said


@pytest.mark.parametrize("load", [False, True], ids=["quiet", "beside-cpu-bound-processes"])
async def test_a_drain_with_runs_waiting_on_approval_and_watchers_keeps_its_bound(
    serve_process: ServeFactory, tmp_path: Path, load: bool
) -> None:
    drain, grace = 2.0, 3.0
    data = tmp_path / "data"
    served = serve_process(
        "--data-dir", str(data), "--drain-timeout", str(drain), "--shutdown-grace", str(grace),
        "--resume-runs", "0",
    )  # fmt: skip
    sessions = [await asyncio.to_thread(pending_run, served, data) for _ in range(3)]
    with cpu_bound_processes() if load else contextlib.nullcontext():
        async with grpc.aio.insecure_channel(served.grpc_address) as channel:
            streams = Streams(channel, watches=3, reflections=1)
            await streams.opened()
            start = time.monotonic()
            served.process.send_signal(signal.SIGTERM)
            status, took = await asyncio.to_thread(exit_after, served, start)
    assert served.process.stderr is not None and served.process.stdout is not None
    said = served.process.stdout.read() + served.process.stderr.read()
    assert status == 0, said
    assert took <= drain + grace + FORCE_SLACK + REAPED, (took, said)
    # The drain ran its course (the runs waited on a person), then the stop
    # recorded each run's abort.
    assert took >= drain
    for session_id in sessions:
        assert records(data, session_id)[-1]["payload"] == {
            "type": "abort",
            "reason": "server shutting down",
        }


def test_a_second_signal_stops_at_once_beside_cpu_bound_processes(
    serve_process: ServeFactory, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    served = serve_process("--data-dir", str(data), "--drain-timeout", "3600", "--resume-runs", "0")
    session_id = pending_run(served, data)
    with cpu_bound_processes():
        signal_and_wait_for_drain(served)
        start = time.monotonic()
        served.process.send_signal(signal.SIGINT)
        status, took = exit_after(served, start)
    assert status == 0
    assert took <= SECOND_SIGNAL_BUDGET + FORCE_SLACK + REAPED, took
    assert kinds(data, session_id)[-1] == "abort"


def blocked_server(serve_process: ServeFactory, tmp_path: Path, *args: str) -> ServeProcess:
    """A server whose event loop a run has blocked for good (blocking_engine.py)."""
    marker = tmp_path / "blocking"
    served = serve_process(
        "--data-dir", str(tmp_path / "data"),
        "--engine", "blocking_engine:create", "--engine-opt", f"marker={marker}",
        *args,
        env={"PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")])},  # noqa: E501
    )  # fmt: skip
    # The run's client never hears back: the loop that would answer is stuck.
    client = subprocess.Popen(
        [sys.executable, "-m", "omni_grpc", "run", "block", "--target", served.grpc_address],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        wait_for(marker.exists, "the run did not start")
    finally:
        client.kill()
        client.wait()
    return served


@pytest.mark.parametrize("second", [signal.SIGTERM, signal.SIGINT])
def test_a_second_signal_stops_a_server_whose_loop_is_blocked(
    serve_process: ServeFactory, tmp_path: Path, second: signal.Signals
) -> None:
    served = blocked_server(serve_process, tmp_path, "--drain-timeout", "3600")
    served.process.send_signal(signal.SIGTERM)  # the loop never gets to drain
    time.sleep(0.5)  # two signals, not one signal sent twice before it is handled
    start = time.monotonic()
    served.process.send_signal(second)
    status, took = exit_after(served, start)
    assert status == EXIT_FORCED
    assert took <= SECOND_SIGNAL_BUDGET + FORCE_SLACK + REAPED, took
    assert served.process.stderr is not None
    said = served.process.stderr.read()
    assert f"stopped before its shutdown finished: a second signal ({second.name})" in said


def test_one_signal_stops_a_server_whose_loop_is_blocked_within_its_bound(
    serve_process: ServeFactory, tmp_path: Path
) -> None:
    drain, grace = 1.0, 1.0
    served = blocked_server(
        serve_process, tmp_path, "--drain-timeout", str(drain), "--shutdown-grace", str(grace)
    )
    start = time.monotonic()
    served.process.send_signal(signal.SIGTERM)
    status, took = exit_after(served, start)
    assert status == EXIT_FORCED
    assert drain + grace <= took <= drain + grace + FORCE_SLACK + REAPED, took
    assert served.process.stderr is not None
    assert "the drain (1 s) and shutdown (1 s) after SIGTERM took longer" in (
        served.process.stderr.read()
    )
