"""The event loop's longest stall while hostile requests arrive (#40).

A probe process calls gRPC ``ListSessions`` every 15 ms and ``GET /healthz``
every 15 ms on a fresh ``omni-grpc serve`` (both ports) and keeps every
latency; meanwhile the benchmark sends one kind of hostile request, several
at once. The figure is the probe's longest wait while they are in flight:
how long one client's request held every other client (health checks,
lease renewals, other calls) waiting. Goal: under 0.5 s.

    .venv/bin/python benchmarks/loop_stall.py [--cases connect-bomb,...]
        [--concurrency 4,8] [--baseline-src OTHER_TREE/src]

Cases:

* ``connect-bomb``: Connect unary (``content-encoding: gzip``), a 200 KB gzip
  of zeros that inflates to about 200 MiB, past the message limit (129 MiB).
* ``connect-lying-bomb``: the same with its gzip trailer forged to declare
  the limit: the server inflates it up to the limit before refusing.
* ``grpc-web-bomb``, ``grpc-web-text-bomb``: the bomb as a compressed gRPC-Web
  (base64 for -text) message (``grpc-encoding: gzip``).
* ``grpc-web-text-large``: a 48 MiB prompt as gRPC-Web-text to Attach (64
  MiB of base64, refused by Attach for its unknown session once read).
* ``sse-json-large``: a 60 MiB JSON body to ``POST /api/sessions/ID/abort``.
* ``connect-json-large``: a 60 MiB ProtoJSON body to Connect Abort.
* ``grpc-bomb``: the bomb on the gRPC port, a ``ListSessions`` whose request
  carries 200 MiB of zeros in an unknown field, sent gzip-compressed
  (``grpc-encoding: gzip``) by grpcio.
* ``slow-readers``: Connect Runs of an 8 MiB prompt (the demo engine echoes
  it back twice) from clients that send their request and never read, held
  open for ``HOLD`` seconds.

``--scale 0.01``: every size (and the server's message limit) times 0.01,
to check the script quickly (tests/test_benchmarks.py).

``--baseline-src``: each case also runs on a server from another tree's
``src/`` (before -> after in one run, the baseline first).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import gzip
import json
import os
import re
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

MiB = 1 << 20
LIMIT = 2 * 64 * MiB + MiB  # the server's default --max-message-bytes (message_size.py)
PROBE_EVERY = 0.015
SERVICE = "omni.v1.AgentService"


@dataclass
class Server:
    process: subprocess.Popen[str]
    grpc: str
    http: str

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()


SCALE = 1.0  # --scale


def sized(n: int) -> int:
    return max(1, int(n * SCALE))


def start_server(data_dir: Path, src: str | None) -> Server:
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = src
    cmd = [sys.executable, "-m", "omni_grpc", "serve", "--grpc-port", "0", "--http-port", "0",
           "--data-dir", str(data_dir), "--no-metrics",
           "--max-message-bytes", str(sized(LIMIT))]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env)
    assert proc.stdout is not None
    grpc = http = None
    for line in proc.stdout:
        if match := re.search(r"gRPC on grpc://(\S+)", line):
            grpc = match.group(1)
        if match := re.search(r"HTTP/SSE on (http://\S+?)/ ", line):
            http = match.group(1)
        if line.strip() == "omni-grpc ready":
            assert grpc is not None and http is not None, (grpc, http)
            return Server(proc, grpc, http)
    raise RuntimeError(f"serve exited: {proc.wait()}")


def rss_mib(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} for {pid}")


# ---- the probe (its own process, so the attack's client work never delays it) ----


def probe_main(grpc_target: str, http_url: str) -> None:
    """Probes until stdin closes, then prints its latencies as JSON."""
    import threading

    import grpc

    from omni_grpc_proto.omni.v1 import agent_service_pb2 as pb
    from omni_grpc_proto.omni.v1 import agent_service_pb2_grpc as rpc

    done = threading.Event()
    found: dict[str, list[float]] = {"grpc": [], "http": []}

    def grpc_probe() -> None:
        with grpc.insecure_channel(grpc_target) as channel:
            stub = rpc.AgentServiceStub(channel)
            stub.ListSessions(pb.ListSessionsRequest(), timeout=60)  # connected
            print("probing", flush=True)
            while not done.wait(PROBE_EVERY):
                start = time.perf_counter()
                stub.ListSessions(pb.ListSessionsRequest(), timeout=120)
                found["grpc"].append(time.perf_counter() - start)

    def http_probe() -> None:
        with httpx.Client(timeout=120) as client:
            while not done.wait(PROBE_EVERY):
                start = time.perf_counter()
                client.get(f"{http_url}/healthz").raise_for_status()
                found["http"].append(time.perf_counter() - start)

    threads = [threading.Thread(target=f) for f in (grpc_probe, http_probe)]
    for thread in threads:
        thread.start()
    sys.stdin.read()
    done.set()
    for thread in threads:
        thread.join()
    print(json.dumps(found), flush=True)


class Probe:
    def __init__(self, server: Server) -> None:
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--probe", server.grpc, server.http],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        assert self.process.stdout.readline().strip() == "probing"

    def finish(self) -> dict[str, list[float]]:
        out, _ = self.process.communicate("", timeout=300)
        return dict(json.loads(out.strip().splitlines()[-1]))


# ---- hostile requests ----------------------------------------------------------------


def envelope(data: bytes, flags: int = 0) -> bytes:
    return struct.pack(">BI", flags, len(data)) + data


def bomb(forged: bool) -> bytes:
    body = gzip.compress(b"\0" * sized(200 * MiB), compresslevel=9, mtime=0)
    return body[:-4] + struct.pack("<I", sized(LIMIT)) if forged else body


@dataclass
class Attack:
    path: str
    headers: dict[str, str]
    body: bytes


def attacks(name: str, session_id: str) -> Attack:
    connect = f"/{SERVICE}/"
    if name in ("connect-bomb", "connect-lying-bomb"):
        return Attack(
            connect + "ListSessions",
            {"content-type": "application/proto", "content-encoding": "gzip"},
            bomb(forged=name == "connect-lying-bomb"),
        )
    if name == "grpc-web-bomb":
        return Attack(
            connect + "ListSessions",
            {"content-type": "application/grpc-web+proto", "grpc-encoding": "gzip"},
            envelope(bomb(False), flags=1),
        )
    if name == "grpc-web-text-bomb":
        return Attack(
            connect + "ListSessions",
            {"content-type": "application/grpc-web-text", "grpc-encoding": "gzip"},
            base64.b64encode(envelope(bomb(False), flags=1)),
        )
    if name == "grpc-web-text-large":
        from omni_grpc_proto.omni.v1 import agent_service_pb2 as pb

        request = pb.AttachRequest(session_id="p" * sized(48 * MiB)).SerializeToString()
        return Attack(
            connect + "Attach",
            {"content-type": "application/grpc-web-text"},
            base64.b64encode(envelope(request)),
        )
    if name == "sse-json-large":
        body = json.dumps({"reason": "r" * sized(60 * MiB)}).encode()
        return Attack(
            f"/api/sessions/{session_id}/abort", {"content-type": "application/json"}, body
        )
    if name == "grpc-bomb":
        # Field 15, length-delimited: unknown to ListSessionsRequest, so only
        # its size matters. grpcio compresses it on the way out.
        size = sized(200 * MiB)
        head = bytes([15 << 3 | 2]) + _varint(size)
        return Attack("grpc", {}, head + b"\0" * size)
    if name == "slow-readers":
        body = json.dumps({"prompt": "s" * sized(8 * MiB)}).encode()
        return Attack(connect + "Run", {"content-type": "application/connect+json"}, envelope(body))
    if name == "connect-json-large":
        body = json.dumps({"sessionId": session_id, "reason": "r" * sized(60 * MiB)}).encode()
        return Attack(connect + "Abort", {"content-type": "application/json"}, body)
    raise SystemExit(f"unknown case {name!r}")


CASES = (
    "connect-bomb",
    "connect-lying-bomb",
    "grpc-web-bomb",
    "grpc-web-text-bomb",
    "grpc-web-text-large",
    "sse-json-large",
    "connect-json-large",
    "slow-readers",
    "grpc-bomb",
)


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


async def grpc_send(server: Server, attack: Attack) -> str:
    """The bomb through grpcio, gzip-compressed by its own channel."""
    import grpc

    options = [("grpc.max_send_message_length", -1)]
    async with grpc.aio.insecure_channel(
        server.grpc, options=options, compression=grpc.Compression.Gzip
    ) as channel:
        call = channel.unary_unary(
            f"/{SERVICE}/ListSessions",
            request_serializer=lambda b: b,
            response_deserializer=lambda b: b,
        )
        try:
            await call(attack.body, timeout=600)
        except grpc.aio.AioRpcError as exc:
            return f"{exc.code().name} {(exc.details() or '')[:120]}"
        return "OK"


HOLD = 5.0  # seconds a slow reader keeps its connection open, reading nothing


async def never_read(server: Server, attack: Attack) -> str:
    """Sends the request on a socket with a small receive buffer, then reads
    nothing for HOLD seconds."""
    host, port = server.http.removeprefix("http://").rsplit(":", 1)
    _reader, writer = await asyncio.open_connection(host, int(port), limit=4096)
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    head = "".join(f"{k}: {v}\r\n" for k, v in attack.headers.items())
    writer.write(
        f"POST {attack.path} HTTP/1.1\r\nHost: {host}:{port}\r\n{head}"
        f"Content-Length: {len(attack.body)}\r\n\r\n".encode()
        + attack.body
    )
    await writer.drain()
    await asyncio.sleep(HOLD)
    writer.close()
    return "held, never read"


async def a_session(server: Server) -> str:
    async with httpx.AsyncClient(timeout=60) as http:
        r = await http.post(f"{server.http}/api/sessions", json={})
        r.raise_for_status()
        return str(r.json()["session"]["sessionId"])


async def one_case(
    server: Server, name: str, concurrency: int
) -> tuple[dict[str, list[float]], float, list[str]]:
    """The probe's latencies, the attack's seconds and each attack's answer."""
    session_id = await a_session(server)
    attack = attacks(name, session_id)
    probe = Probe(server)
    answers: list[str] = []
    try:
        await asyncio.sleep(0.5)  # a quiet stretch: the probe's own baseline
        started = time.perf_counter()
        async with httpx.AsyncClient(timeout=600) as http:

            async def send() -> None:
                if name == "slow-readers":
                    answers.append(await never_read(server, attack))
                    return
                if name == "grpc-bomb":
                    answers.append(await grpc_send(server, attack))
                    return
                r = await http.post(
                    server.http + attack.path, content=attack.body, headers=attack.headers
                )
                message = r.headers.get("grpc-message") or r.text[:120]
                answers.append(f"{r.status_code} {r.headers.get('grpc-status', '')} {message}")

            await asyncio.gather(*(send() for _ in range(concurrency)))
        seconds = time.perf_counter() - started
        await asyncio.sleep(0.3)
    finally:
        latencies = probe.finish()
    return latencies, seconds, answers


def summary(values: list[float]) -> str:
    if not values:
        return "- | -"
    return f"{max(values) * 1000:.0f} | {statistics.median(values) * 1000:.0f}"


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--probe", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--concurrency", default="4")
    parser.add_argument("--baseline-src", help="another tree's src/ for a 'before' server")
    parser.add_argument("--show-answers", action="store_true")
    parser.add_argument("--scale", type=float, default=1.0, help="every size times this")
    args = parser.parse_args()
    global SCALE
    SCALE = args.scale
    if args.probe:
        probe_main(*args.probe)
        return
    trees: list[tuple[str, str | None]] = (
        [("before", args.baseline_src), ("after", None)] if args.baseline_src else [("", None)]
    )
    tree_column = ("| tree ", "|---") if args.baseline_src else ("", "")
    print(
        f"{tree_column[0]}| case | concurrent | gRPC probe max ms | gRPC probe median ms "
        "| HTTP probe max ms | HTTP probe median ms | attack s | RSS growth MiB |"
    )
    print(f"{tree_column[1]}|---|---:|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        n = 0
        for name in args.cases.split(","):
            for concurrency in map(int, args.concurrency.split(",")):
                for tree, src in trees:
                    n += 1
                    server = start_server(Path(tmp) / f"serve-{n}", src)
                    try:
                        base = rss_mib(server.process.pid, "VmRSS")
                        latencies, seconds, answers = await one_case(server, name, concurrency)
                        growth = rss_mib(server.process.pid, "VmHWM") - base
                    finally:
                        server.stop()
                    print(
                        f"{f'| {tree} ' if tree else ''}| {name} | {concurrency} "
                        f"| {summary(latencies['grpc'])} | {summary(latencies['http'])} "
                        f"| {seconds:.1f} | {growth:.0f} |",
                        flush=True,
                    )
                    if args.show_answers:
                        for answer in sorted(set(answers)):
                            print(f"    {answer}", file=sys.stderr)


if __name__ == "__main__":
    asyncio.run(main())
