"""The HTTP port's server stack over HTTP/2 (issue 42): the server process's
CPU per request, as ratios to this server's HTTP/1.1 in the same run.

Each row is one ``omni-grpc`` server process (demo engine, no pacing) whose
HTTP app is served by one stack:

* ``uvicorn-h11+h2``: this server (uvicorn's h11 for HTTP/1.1, the hand-off
  to transport/sse/http2.py for HTTP/2);
* ``hypercorn``: the same app under Hypercorn (its h11 and h2);
* ``granian``: the same app under Granian (Rust, ASGI interface);
* ``uvicorn-zttp``: the same app under uvicorn's own HTTP/2 (``http="zttp"``).

Two workloads, each over HTTP/1.1 and HTTP/2, plain and TLS: ``sse``, runs
streamed from ``POST /v1/runs`` (about 20 events each), and ``unary``,
Connect unary ``ListSessions`` calls. The client (httpx, HTTP/2 by h2) runs
in this process with ``--concurrency`` requests in flight; the figure is the
server process's user+system CPU (``/proc/PID/stat``) per request, so the
client's own cost is not in it.

    .venv/bin/python benchmarks/http2.py [--requests 200] [--runs 40]
        [--stacks uvicorn-h11+h2,hypercorn,granian,uvicorn-zttp]

Hypercorn, Granian and zttp are not dependencies: pip install them to
measure them (a stack that is missing is reported as such).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
STACKS = ["uvicorn-h11+h2", "hypercorn", "granian", "uvicorn-zttp"]
CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def make_certs(directory: Path) -> None:
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    subprocess.run(
        ["openssl", "req", "-x509", *ec, "-keyout", "server.key", "-out", "server.pem",
         "-days", "1", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
        cwd=directory, check=True, capture_output=True,
    )  # fmt: skip


# -- the server process ---------------------------------------------------------


async def serve(stack: str, port: int, certs: Path | None) -> None:
    from omni_grpc.runtime.approvals import ApprovalMode
    from omni_grpc.server import ServerConfig, build_server
    from omni_grpc.transport.grpc import GrpcConfig
    from omni_grpc.transport.sse.transport import SseConfig, SseTransport

    tls: dict[str, Any] = {}
    if certs is not None:
        tls = {"tls_cert": certs / "server.pem", "tls_key": certs / "server.key"}
    ours = stack == "uvicorn-h11+h2"
    data = Path(tempfile.mkdtemp(prefix="omni-h2-bench-"))
    config = ServerConfig(
        engine="demo",
        engine_options={"pacing": "0"},
        data_dir=data,
        approval_mode=ApprovalMode.ALLOW_ALL,
        grpc=GrpcConfig(host="127.0.0.1", port=0),
        http=SseConfig(host="127.0.0.1", port=port if ours else 0, **(tls if ours else {})),
        metrics=False,
    )
    server = build_server(config)
    await server.start()
    transport = next(t for t in server.transports if isinstance(t, SseTransport))
    # The very app this server's uvicorn serves (the Connect mount included).
    app = transport.server._config.app
    cert = str(certs / "server.pem") if certs else None
    key = str(certs / "server.key") if certs else None
    if stack == "hypercorn":
        from hypercorn.asyncio import serve as hypercorn_serve
        from hypercorn.config import Config

        hconfig = Config()
        hconfig.bind = [f"127.0.0.1:{port}"]
        hconfig.accesslog = None
        hconfig.loglevel = "WARNING"
        if cert:
            hconfig.certfile, hconfig.keyfile = cert, key
        print("ready", flush=True)
        await hypercorn_serve(app, hconfig)
    elif stack == "granian":
        from granian.constants import HTTPModes, Interfaces
        from granian.server.embed import Server

        granian = Server(
            app, address="127.0.0.1", port=port, interface=Interfaces.ASGI,
            http=HTTPModes.auto, ssl_cert=Path(cert) if cert else None,
            ssl_key=Path(key) if key else None, log_enabled=False,
        )  # fmt: skip
        print("ready", flush=True)
        await granian.serve()
    elif stack == "uvicorn-zttp":
        import uvicorn

        uconfig = uvicorn.Config(
            app, host="127.0.0.1", port=port, http="zttp", http2=True, log_level="warning",
            lifespan="off", ssl_certfile=cert, ssl_keyfile=key,
        )  # fmt: skip
        print("ready", flush=True)
        await uvicorn.Server(uconfig).serve()
    else:
        print("ready", flush=True)
        await asyncio.Event().wait()


# -- the client -------------------------------------------------------------------


async def load(
    base: str, http2: bool, workload: str, count: int, concurrency: int, verify: Any
) -> int:
    kwargs: dict[str, Any] = {"http2": http2, "verify": verify, "timeout": 60}
    if http2 and base.startswith("http://"):
        kwargs["http1"] = False  # h2c with prior knowledge
    done = 0
    async with httpx.AsyncClient(base_url=base, **kwargs) as http:
        probe = await http.get("/healthz")
        want = "HTTP/2" if http2 else "HTTP/1.1"
        assert probe.http_version == want, (probe.http_version, want)
        queue = iter(range(count))

        async def worker() -> None:
            nonlocal done
            for i in queue:
                if workload == "sse":
                    r = await http.post("/v1/runs", json={"prompt": f"bench {i}"})
                    assert "event: done" in r.text, r.text[:200]
                else:
                    r = await http.post(
                        "/omni.v1.AgentService/ListSessions",
                        content=b"{}",
                        headers={"content-type": "application/json"},
                    )
                    assert r.status_code == 200, r.text[:200]
                done += 1

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return done


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def measure(stack: str, tls: bool, certs: Path, args: argparse.Namespace) -> dict[str, Any]:
    port = free_port()
    cmd = [sys.executable, __file__, "--serve", stack, "--port", str(port)]
    if tls:
        cmd += ["--certs", str(certs)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if line.strip() != "ready":
            proc.kill()
            return {"error": (proc.stderr.read() if proc.stderr else "")[-300:].strip()}
        base = f"{'https' if tls else 'http'}://127.0.0.1:{port}"
        verify: Any = ssl.create_default_context(cafile=str(certs / "server.pem"))
        rows: dict[str, Any] = {}
        for workload, count in (("sse", args.runs), ("unary", args.requests)):
            for http2 in (False, True):
                # Wait until the server answers (Granian binds after "ready").
                for _ in range(200):
                    try:
                        httpx.get(f"{base}/healthz", verify=verify, timeout=2)
                        break
                    except httpx.TransportError:
                        time.sleep(0.05)
                asyncio.run(load(base, http2, workload, 5, 1, verify))  # warm up
                before = cpu_seconds(proc.pid)
                try:
                    n = asyncio.run(load(base, http2, workload, count, args.concurrency, verify))
                except Exception as exc:  # a stack that cannot do it is a row saying so
                    rows[f"{workload} {'h2' if http2 else 'h1'}"] = f"failed: {exc!r}"[:120]
                    continue
                rows[f"{workload} {'h2' if http2 else 'h1'}"] = (cpu_seconds(proc.pid) - before) / n
        return rows
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=200, help="unary calls per row")
    parser.add_argument("--runs", type=int, default=40, help="SSE runs per row")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--stacks", default=",".join(STACKS))
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--certs", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(serve(args.serve, args.port, args.certs))
        return
    certs = Path(tempfile.mkdtemp(prefix="omni-h2-certs-"))
    make_certs(certs)
    results: dict[tuple[str, bool], dict[str, Any]] = {}
    for stack in args.stacks.split(","):
        for tls in (False, True):
            results[(stack, tls)] = measure(stack, tls, certs, args)
    baseline = results.get(("uvicorn-h11+h2", False), {})
    print("server CPU per request, ratio to uvicorn-h11+h2 over plain HTTP/1.1 (same run)")
    print(f"{'stack':16} {'tls':4} {'workload':9} {'ms/request':>10} {'ratio':>6}")
    for (stack, tls), rows in results.items():
        if "error" in rows:
            print(f"{stack:16} {'yes' if tls else 'no':4} did not start: {rows['error']}")
            continue
        for name, value in rows.items():
            if isinstance(value, str):
                print(f"{stack:16} {'yes' if tls else 'no':4} {name:9} {value}")
                continue
            base = baseline.get(name.split()[0] + " h1")
            ratio = f"{value / base:.2f}x" if isinstance(base, float) and base else "-"
            print(f"{stack:16} {'yes' if tls else 'no':4} {name:9} {value * 1000:10.2f} {ratio:>6}")


if __name__ == "__main__":
    main()
