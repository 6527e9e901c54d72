"""``--allowed-host`` replaces the default names (docs/deployment.md says so,
and shows the full list to give): a replica started with only the load
balancer's name refuses ``/healthz`` on its own address, and answers it once
the loopback names are listed again."""

from __future__ import annotations

from collections.abc import Callable

import httpx
from conftest import ServeProcess


def test_allowed_host_replaces_the_defaults(serve_process: Callable[..., ServeProcess]) -> None:
    only = serve_process("--allowed-host", "agent.example.com")
    assert only.http_address is not None
    own = f"http://{only.http_address}"
    assert httpx.get(f"{own}/healthz").status_code == 403
    assert httpx.get(f"{own}/healthz", headers={"host": "agent.example.com"}).status_code == 200
    only.process.terminate()
    only.process.wait(20)
    listed = serve_process(
        "--allowed-host", "agent.example.com",
        "--allowed-host", "localhost",
        "--allowed-host", "127.0.0.1",
    )  # fmt: skip
    assert listed.http_address is not None
    assert httpx.get(f"http://{listed.http_address}/healthz").status_code == 200
