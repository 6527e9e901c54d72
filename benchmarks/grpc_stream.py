"""The gRPC Run stream against a raw grpc.aio floor, with 1 to N subscribers
per session, native codec against pure Python, memory backend against Redis,
and this tree against an older checkout, all in one run.

* omni: real ``omni-grpc serve`` processes (demo engine, zero pacing, a long
  answer), one with the native codec and one with ``OMNI_GRPC_NATIVE=0``.
  For N subscribers, N - 1 clients ``Attach`` to a session (each on its own
  connection) and wait for their first message; then one more client
  ``Run``s a task in that session. All N streams get every event of the task.
* ``--backends memory,redis``: each omni server once per backend; a Redis
  server gets a real ``redis-server`` of its own (no persistence, so its disk
  is not measured), and its CPU per delivered event is printed beside the
  omni server's.
* ``--before DIR``: each omni server also from the source tree ``DIR`` (a
  ``git worktree add`` of an older commit, its native extension built or
  copied in), served side by side with this tree, named ``...-before``.
* floor: a bare grpc.aio server process streaming the very same RunResponse
  bytes (recorded from a calibration run, so count and sizes match),
  pre-serialized, with no hub, engine, codec or trace behind it; for N
  subscribers, N clients on their own connections stream them at once.

* new: one client per sample that connects, ``Run``s in a new session (or
  streams the floor) and hangs up, connection set-up and HTTP/2 flow-control
  warm-up included: the earlier form of this benchmark, and a one-shot
  client's view. The subscriber counts keep their connections between rounds.

Measured per sample: the events/s each stream saw (events of the task over
the time from the Run call until the last subscriber had its last event),
the time to the first message (1 subscriber), and the SERVER process's CPU
time (all its threads, /proc schedstat) per delivered event (events x subscribers).
Rounds interleave every server and subscriber count, rotating the order;
each figure is the best of the rounds, ratios are of the best figures, and
the median of the per-round ratios is printed beside them. Last, in this
process: the hub's codec work per event with each codec, and the
per-subscriber work of building and serializing an AttachResponse.

    .venv/bin/python benchmarks/grpc_stream.py [--repeat 300] [--rounds 3]
        [--subscribers new,1,10,100] [--codecs native,pure]
        [--backends memory,redis] [--before /tmp/omni-before]

``--repeat`` is the demo engine's answer repetitions (300: 2,446 events).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from _common import (  # benchmarks/_common.py
    best_seconds,
    cpu_seconds,
    free_port,
    threads_cpu_seconds,
)

from omni_grpc_proto.omni.v1 import agent_service_pb2 as pb
from omni_grpc_proto.omni.v1 import agent_service_pb2_grpc

FLOOR_METHOD = "/bench.Floor/Stream"
# (events, bytes, seconds to the first event, seconds for the whole stream,
#  server CPU seconds spent during the stream); metrics_overhead.py uses it too.
Sample = tuple[int, int, float, float, float]
# Each subscriber its own TCP connection, as separate clients would have
# (channels to one target otherwise share a subchannel, hence a connection).
CHANNEL_OPTIONS = [("grpc.use_local_subchannel_pool", 1)]
# In --subscribers: one client on a new connection per Run, in a new session.
COLD = 0


# ---- the floor server (child process) -------------------------------------------


def read_frames(path: Path) -> list[bytes]:
    data = path.read_bytes()
    frames, offset = [], 0
    while offset < len(data):
        (size,) = struct.unpack_from(">I", data, offset)
        frames.append(data[offset + 4 : offset + 4 + size])
        offset += 4 + size
    return frames


async def serve_floor(frames_path: Path) -> None:
    frames = read_frames(frames_path)

    async def stream(_request: bytes, _context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
        for frame in frames:
            yield frame

    server = grpc.aio.server()
    handler = grpc.unary_stream_rpc_method_handler(stream)  # bytes in, bytes out
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("bench.Floor", {"Stream": handler}),)
    )
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(f"floor on 127.0.0.1:{port}", flush=True)
    await server.wait_for_termination()


# ---- one subscriber's stream (used by metrics_overhead.py too) ----------------------


async def measured(pid: int, run: Awaitable[tuple[int, int, float, float]]) -> Sample:
    before = threads_cpu_seconds(pid)
    count, size, first, total = await run
    return count, size, first, total, threads_cpu_seconds(pid) - before


async def omni_run(
    target: str, prompt: str, keep: list[bytes] | None = None
) -> tuple[int, int, float, float]:
    async with grpc.aio.insecure_channel(target) as channel:
        return await _run_on(channel, prompt, "", keep)


async def _run_on(
    channel: grpc.aio.Channel, prompt: str, session_id: str, keep: list[bytes] | None = None
) -> tuple[int, int, float, float]:
    stub = agent_service_pb2_grpc.AgentServiceStub(channel)
    start = time.perf_counter()
    first, count, size = 0.0, 0, 0
    async for response in stub.Run(pb.RunRequest(prompt=prompt, session_id=session_id)):
        count += 1
        if count == 1:
            first = time.perf_counter() - start
        if keep is None:
            size += response.ByteSize()  # as the floor's client counts it
        else:
            keep.append(response.SerializeToString())
            size += len(keep[-1])
    return count, size, first, time.perf_counter() - start


async def _floor_on(channel: grpc.aio.Channel) -> tuple[int, int, float, float]:
    call = channel.unary_stream(
        FLOOR_METHOD,
        request_serializer=lambda b: b,
        response_deserializer=pb.RunResponse.FromString,
    )
    start = time.perf_counter()
    first, count, size = 0.0, 0, 0
    async for response in call(b""):
        count += 1
        if count == 1:
            first = time.perf_counter() - start
        size += response.ByteSize()
    return count, size, first, time.perf_counter() - start


async def floor_run(target: str) -> tuple[int, int, float, float]:
    async with grpc.aio.insecure_channel(target) as channel:
        return await _floor_on(channel)


def start(
    cmd: list[str], marker: str, env: dict[str, str] | None = None
) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    for line in proc.stdout:
        if marker in line:
            return proc, line.strip().rsplit(" ", 1)[-1].split("://")[-1]
    raise RuntimeError(f"{cmd[2:4]} did not start")


# ---- N subscribers on one session ---------------------------------------------------


@dataclass
class Fanout:
    """One sample: a task (or the floor's stream) delivered to ``subscribers`` streams."""

    subscribers: int
    events: int  # per stream
    first: float  # seconds from the call to the Run caller's first message
    seconds: float  # from the call until the last subscriber had its last event
    cpu: float  # server CPU seconds meanwhile (its threads' schedstat)
    ticks: float  # the same from /proc stat (whole process, 10 ms ticks): a cross-check
    redis_cpu: float = 0.0  # the target's redis-server CPU seconds meanwhile (Redis only)

    @property
    def rate(self) -> float:
        """Events/s each stream saw."""
        return self.events / self.seconds

    @property
    def cpu_per_delivered(self) -> float:
        """Server CPU microseconds per event per subscriber."""
        return self.cpu / (self.events * self.subscribers) * 1e6

    @property
    def redis_per_delivered(self) -> float:
        return self.redis_cpu / (self.events * self.subscribers) * 1e6


def _is_task_end(response: pb.AttachResponse) -> bool:
    return (
        response.WhichOneof("kind") == "event"
        and response.event.WhichOneof("kind") == "task_state"
        and response.event.task_state.state == pb.SESSION_STATE_IDLE
    )


@dataclass
class Target:
    name: str
    pid: int
    address: str
    redis_pid: int | None = None
    channels: list[grpc.aio.Channel] = field(default_factory=list)
    sessions: dict[int, str] = field(default_factory=dict)  # subscribers -> session id

    def open(self, count: int) -> list[grpc.aio.Channel]:
        while len(self.channels) < count:
            self.channels.append(grpc.aio.insecure_channel(self.address, options=CHANNEL_OPTIONS))
        return self.channels[:count]


async def omni_fanout(target: Target, subscribers: int) -> Fanout:
    channels = target.open(subscribers)
    session_id = target.sessions.get(subscribers)
    if session_id is None:  # a session of its own per subscriber count, made once
        stub = agent_service_pb2_grpc.AgentServiceStub(channels[0])
        async for response in stub.Run(pb.RunRequest(prompt="bench")):
            session_id = response.session_id
        assert session_id is not None
        target.sessions[subscribers] = session_id
    calls = [
        agent_service_pb2_grpc.AgentServiceStub(channel).Attach(
            pb.AttachRequest(session_id=session_id)
        )
        for channel in channels[1:]
    ]
    streams = [call.__aiter__() for call in calls]
    # Attached once each has its unicast task_state: from here it sees every event.
    await asyncio.gather(*(anext(stream) for stream in streams))

    async def watch(stream: AsyncIterator[pb.AttachResponse]) -> tuple[int, float]:
        count = 0
        async for response in stream:
            count += 1
            if _is_task_end(response):
                return count, time.perf_counter()
        raise RuntimeError("an Attach stream ended before the task did")

    try:
        ticks = cpu_seconds(target.pid)
        before = threads_cpu_seconds(target.pid)
        redis_before = _redis_cpu(target)
        begin = time.perf_counter()
        watchers = [asyncio.create_task(watch(stream)) for stream in streams]
        events, _, first, total = await _run_on(channels[0], "go", session_id)
        seen = await asyncio.gather(*watchers)
        used = threads_cpu_seconds(target.pid) - before
        ticks = cpu_seconds(target.pid) - ticks
        redis_used = _redis_cpu(target) - redis_before
    finally:
        for call in calls:
            call.cancel()
    if any(count != events for count, _ in seen):
        counts = sorted({count for count, _ in seen})
        raise RuntimeError(f"{target.name}: Run saw {events} events, Attach streams {counts}")
    end = max([begin + total, *(at for _, at in seen)])
    return Fanout(subscribers, events, first, end - begin, used, ticks, redis_used)


def _redis_cpu(target: Target) -> float:
    return 0.0 if target.redis_pid is None else threads_cpu_seconds(target.redis_pid)


async def cold_run(target: Target) -> Fanout:
    """One client that connects, streams one Run in a new session (or the
    floor's stream) and hangs up: what a one-shot client sees, connection
    set-up and HTTP/2 flow-control warm-up included."""
    ticks = cpu_seconds(target.pid)
    before = threads_cpu_seconds(target.pid)
    redis_before = _redis_cpu(target)
    begin = time.perf_counter()
    async with grpc.aio.insecure_channel(target.address, options=CHANNEL_OPTIONS) as channel:
        if target.name == "floor":
            events, _, first, _ = await _floor_on(channel)
        else:
            events, _, first, _ = await _run_on(channel, "go", "")
        seconds = time.perf_counter() - begin
    used = threads_cpu_seconds(target.pid) - before
    ticks = cpu_seconds(target.pid) - ticks
    return Fanout(1, events, first, seconds, used, ticks, _redis_cpu(target) - redis_before)


async def floor_fanout(target: Target, subscribers: int) -> Fanout:
    channels = target.open(subscribers)
    ticks = cpu_seconds(target.pid)
    before = threads_cpu_seconds(target.pid)
    begin = time.perf_counter()

    async def one(channel: grpc.aio.Channel) -> tuple[int, float, float]:
        count, _, first, _ = await _floor_on(channel)
        return count, first, time.perf_counter()

    seen = await asyncio.gather(*(one(channel) for channel in channels))
    used = threads_cpu_seconds(target.pid) - before
    ticks = cpu_seconds(target.pid) - ticks
    events = seen[0][0]
    assert all(count == events for count, _, _ in seen)
    seconds = max(at for *_, at in seen) - begin
    return Fanout(subscribers, events, seen[0][1], seconds, used, ticks)


# ---- in process: what the servers do per event and per subscriber ------------------


def in_process_costs(frames: list[bytes], codecs: list[str], repeat: int = 7) -> None:
    """The hub's once-per-event codec work and the once-per-event response
    work, timed here on the calibration run's own messages (best of ``repeat``)."""
    from omni_grpc.convert import _message, message_to_dict
    from omni_grpc.runtime.agent_service import response_bytes
    from omni_grpc.runtime.bodies import engine_message
    from omni_grpc.runtime.events import HubEvent

    responses = [pb.RunResponse.FromString(frame) for frame in frames]
    dicts = [message_to_dict(r.message) for r in responses if r.WhichOneof("kind") == "message"]

    def codec() -> None:  # as the hub does for each message an engine yields
        for item in dicts:
            engine_message(item)

    made = [engine_message(item)[1] for item in dicts]

    def respond() -> None:  # as AgentService does for each event (then shared)
        for i, body in enumerate(made):
            response_bytes(HubEvent(i, f"bench-{i}", body, True), "bench-session")

    native = _message.NATIVE
    per_event = {}
    try:
        for codec_name in codecs:
            _message.NATIVE = native if codec_name == "native" else None
            per_event[codec_name] = best_seconds(codec, repeat) / len(dicts) * 1e6
    finally:
        _message.NATIVE = native
    respond_us = best_seconds(respond, repeat) / len(made) * 1e6
    costs = ", ".join(f"{name} {us:.2f} us" for name, us in per_event.items())
    print(
        f"in process, on the run's {len(dicts)} messages: the hub's codec work per event "
        f"(engine_message: wire bytes and JSON text): {costs}; encoding an event's "
        f"Run/Attach response (once, for all its subscribers): {respond_us:.2f} us"
    )


# ---- the run ------------------------------------------------------------------------


def native_built() -> bool:
    from omni_grpc.convert import _message

    return _message.NATIVE is not None


def serve_cmd(
    data_dir: Path, repeat: int, subscribers: int, redis_url: str | None = None
) -> list[str]:
    cmd = [
        sys.executable, "-m", "omni_grpc", "serve", "--grpc-port", "0", "--no-http",
        "--data-dir", str(data_dir), "--engine-opt", f"repeat={repeat}",
        "--max-streams-per-session", str(max(128, subscribers + 8)),
    ]  # fmt: skip
    return cmd if redis_url is None else [*cmd, "--redis-url", redis_url]


def start_redis(directory: Path) -> tuple[subprocess.Popen[bytes], str]:
    """A real redis-server on a free port, without persistence; waits for PING."""
    import redis

    directory.mkdir(parents=True)
    port = free_port()
    proc = subprocess.Popen(
        [
            "redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(directory),
            "--appendonly", "no", "--save", "", "--protected-mode", "no",
            "--logfile", str(directory / "redis.log"),
        ],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    client = redis.Redis(port=port)
    for _ in range(500):
        try:
            if client.ping():
                break
        except redis.ConnectionError:
            time.sleep(0.02)
    else:
        raise RuntimeError("redis-server did not answer PING")
    client.close()
    return proc, f"redis://127.0.0.1:{port}/0"


def _tree_env(base: dict[str, str], tree: Path | None) -> dict[str, str]:
    """The environment that serves from ``tree`` (ahead of the editable install)."""
    if tree is None:
        return base
    paths = [str(tree / "src"), str(tree / "generated" / "python")]
    return {**base, "PYTHONPATH": os.pathsep.join(paths)}


async def bench(
    repeat: int,
    rounds: int,
    counts: list[int],
    codecs: list[str],
    backends: list[str] | None = None,
    before: Path | None = None,
) -> None:
    env_for = {
        "native": {**os.environ, "OMNI_GRPC_NATIVE": "1"},
        "pure": {**os.environ, "OMNI_GRPC_NATIVE": "0"},
    }
    backends = backends or ["memory"]
    trees: list[tuple[str, Path | None]] = [("", None)]
    if before is not None:
        trees.append(("-before", before))
    procs: list[subprocess.Popen[str]] = []
    redises: list[subprocess.Popen[bytes]] = []
    targets: list[Target] = []
    load_before = os.getloadavg()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for backend in backends:
                for codec in codecs:
                    for suffix, tree in trees:
                        # Named by what differs: the codec, the backend, the tree.
                        parts = [codec] if len(codecs) > 1 or backends == ["memory"] else []
                        if backends != ["memory"]:
                            parts.append(backend)
                        name = "/".join(parts) + suffix
                        redis_url, redis_pid = None, None
                        if backend == "redis":
                            redis_proc, redis_url = start_redis(Path(tmp, name, "redis"))
                            redises.append(redis_proc)
                            redis_pid = redis_proc.pid
                        proc, address = start(
                            serve_cmd(Path(tmp, name, "data"), repeat, max(counts), redis_url),
                            "gRPC on",
                            _tree_env(env_for[codec], tree),
                        )
                        procs.append(proc)
                        targets.append(Target(name, proc.pid, address, redis_pid))
            names = [t.name for t in targets]
            frames: list[bytes] = []
            await omni_run(targets[0].address, "calibrate", frames)
            frames_path = Path(tmp, "frames.bin")
            frames_path.write_bytes(b"".join(struct.pack(">I", len(f)) + f for f in frames))
            proc, address = start(
                [sys.executable, __file__, "--serve-floor", str(frames_path)], "floor on"
            )
            procs.append(proc)
            targets.append(Target("floor", proc.pid, address))

            def sampler(target: Target) -> Callable[[int], Awaitable[Fanout]]:
                def sample(n: int) -> Awaitable[Fanout]:
                    if n == COLD:
                        return cold_run(target)
                    if target.name == "floor":
                        return floor_fanout(target, n)
                    return omni_fanout(target, n)

                return sample

            samples: dict[tuple[str, int], list[Fanout]] = {
                (t.name, n): [] for t in targets for n in counts
            }
            for n in counts:  # warm up: sessions, connections, code paths
                for target in targets:
                    await sampler(target)(n)
            for i in range(rounds):
                for n in counts:
                    shift = (i + n) % len(targets)  # rotate who goes first
                    for target in targets[shift:] + targets[:shift]:
                        samples[(target.name, n)].append(await sampler(target)(n))
            for target in targets:
                for channel in target.channels:
                    await channel.close()
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait()
        for redis_proc in redises:
            redis_proc.terminate()
            redis_proc.wait()
    report(samples, names, counts, frames, rounds, repeat, load_before, os.getloadavg())
    in_process_costs(frames, codecs)


def report(
    samples: dict[tuple[str, int], list[Fanout]],
    names: list[str],  # the omni servers'
    counts: list[int],
    frames: list[bytes],
    rounds: int,
    repeat: int,
    load_before: tuple[float, float, float],
    load_after: tuple[float, float, float],
) -> None:
    def best_rate(name: str, n: int) -> float:
        return max(s.rate for s in samples[(name, n)])

    def best_cpu(name: str, n: int) -> float:
        return min(s.cpu_per_delivered for s in samples[(name, n)])

    def round_ratio(name: str, n: int, value: Callable[[Fanout], float]) -> float:
        pairs = zip(samples[(name, n)], samples[("floor", n)], strict=True)
        return statistics.median(value(a) / value(b) for a, b in pairs)

    events = samples[("floor", counts[-1])][0].events
    size = sum(len(f) for f in frames)
    print(
        f"demo engine, repeat={repeat}: {events} events, {size:,} bytes per stream; "
        f"best of {rounds} interleaved rounds; load average {load_before[0]:.2f} before, "
        f"{load_after[0]:.2f} after"
    )
    print(
        "subs = streams on the session (the Run caller + Attach clients, each on a connection "
        "it keeps); new = one client per Run on a new connection, in a new session; rate is "
        "per stream; CPU is the server process's, per delivered event"
    )
    width = max(7, *(len(name) for name in names))
    redis_cpu = any(s.redis_cpu for group in samples.values() for s in group)
    head = (
        f"{'subs':>4} {'server':>{width}} {'events/s':>9} {'vs floor':>9} {'(rounds)':>8} "
        f"{'CPU us/ev':>10} {'(median)':>8} {'floor/CPU':>10} {'(rounds)':>8} {'first msg':>10}"
    )
    if redis_cpu:
        head += f" {'redis us/ev':>11}"
    print(head)
    for n in counts:
        for name in [*names, "floor"]:
            rate, cpu = best_rate(name, n), best_cpu(name, n)
            first = min(s.first for s in samples[(name, n)]) * 1000
            median = statistics.median(s.cpu_per_delivered for s in samples[(name, n)])
            if name == "floor":
                ratios = f"{'':>9} {'':>8} {cpu:>10.1f} {median:>8.1f} {'':>10} {'':>8}"
            else:
                rate_rounds = round_ratio(name, n, lambda s: s.rate)
                cpu_rounds = round_ratio(name, n, lambda s: 1 / s.cpu_per_delivered)
                ratios = (
                    f"{rate / best_rate('floor', n):>9.2f} {rate_rounds:>8.2f} {cpu:>10.1f} "
                    f"{median:>8.1f} {best_cpu('floor', n) / cpu:>10.2f} {cpu_rounds:>8.2f}"
                )
            label = "new" if n == COLD else str(n)
            line = f"{label:>4} {name:>{width}} {rate:>9,.0f} {ratios} {first:>8.2f}ms"
            if redis_cpu and any(s.redis_cpu for s in samples[(name, n)]):
                # the median: the best of a second process's CPU means little
                redis = statistics.median(s.redis_per_delivered for s in samples[(name, n)])
                line += f" {redis:>11.1f}"
            print(line)
    every = [s for group in samples.values() for s in group]
    print(
        f"cross-check: server CPU over all samples {sum(s.cpu for s in every):.2f} s from "
        f"threads' schedstat, {sum(s.ticks for s in every):.2f} s from /proc stat"
    )
    fanned = [n for n in counts if n != COLD]
    if len(fanned) > 1:
        low, high = min(fanned), max(fanned)
        print(
            f"server CPU per extra subscriber per event ({low} -> {high} subscribers), "
            "from the best and (in brackets) the median CPU per delivered event:"
        )
        for name in [*names, "floor"]:
            # CPU per task event over all its subscribers, at each end of the range.
            per_event = {n: best_cpu(name, n) * n for n in (low, high)}
            slope = (per_event[high] - per_event[low]) / (high - low)
            medians = {
                n: statistics.median(s.cpu_per_delivered for s in samples[(name, n)]) * n
                for n in (low, high)
            }
            median_slope = (medians[high] - medians[low]) / (high - low)
            print(
                f"  {name:>{width}}: {slope:6.1f} us ({median_slope:.1f}); one event to {low}: "
                f"{per_event[low]:.1f} us, to {high}: {per_event[high]:.1f} us"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--repeat", type=int, default=300, help="demo answer repetitions")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (best of)")
    parser.add_argument(
        "--subscribers", default="new,1,10,100", help="comma-separated counts, and/or new"
    )
    parser.add_argument("--codecs", default="native,pure", help="native, pure or both")
    parser.add_argument("--backends", default="memory", help="memory, redis or both")
    parser.add_argument(
        "--before", type=Path, help="also serve from this source tree (an older checkout)"
    )
    parser.add_argument("--serve-floor", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_floor:
        asyncio.run(serve_floor(args.serve_floor))
        return
    words = [w for w in args.subscribers.split(",") if w]
    codecs = [c for c in args.codecs.split(",") if c]
    backends = [b for b in args.backends.split(",") if b]
    if (
        not words
        or not all(w == "new" or (w.isdigit() and int(w) >= 1) for w in words)
        or not codecs
        or set(codecs) - {"native", "pure"}
        or not backends
        or set(backends) - {"memory", "redis"}
    ):
        parser.error(
            "--subscribers takes new and counts >= 1, --codecs native and/or pure, "
            "--backends memory and/or redis"
        )
    counts = sorted({COLD if w == "new" else int(w) for w in words})
    if "native" in codecs and not native_built():
        print("the native codec is not built here: measuring the pure path only")
        codecs = [c for c in codecs if c != "native"] or ["pure"]
    if args.before is not None and not (args.before / "src" / "omni_grpc").is_dir():
        parser.error(f"--before {args.before}: no src/omni_grpc there")
    asyncio.run(bench(args.repeat, args.rounds, counts, codecs, backends, args.before))


if __name__ == "__main__":
    main()
