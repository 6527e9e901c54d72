"""docs/connect.md's shell examples, run as written against a real
``omni-grpc serve`` (only the address is replaced), and its nginx snippet
checked against the tested config."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Callable
from typing import Any

import pytest
from connect_serving import ROOT, json_documents, require_buf

DOC = ROOT / "docs" / "connect.md"


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOC.read_text(), re.S)


def _run(block: str, address: str) -> str:
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block.replace("127.0.0.1:8080", address)],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, (block, done.stderr)
    return done.stdout


def test_the_shell_examples_run(serve_process: Callable[..., Any]) -> None:
    require_buf()
    for tool in ("curl", "xxd"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} missing (scripts/setup installs it)")
    served = serve_process()
    assert served.http_address is not None
    listing, stream, buf = _blocks("bash")
    assert json_documents(_run(listing, served.http_address)) == [{}]
    # The end-of-stream envelope closes a stream that went well.
    lines = [line for line in _run(stream, served.http_address).splitlines() if line.strip()]
    assert '"SESSION_STATE_IDLE"' in lines[-2] and lines[-1] == "end of stream: {}"
    assert all(json_documents(line) for line in lines[:-1])  # whole messages, one a line
    out = json_documents(_run(buf, served.http_address))
    assert out[-1]["sessions"] and len(out[-1]["sessions"]) == 2  # curl's run and buf's
    assert out[-2]["event"]["taskState"]["state"] == "SESSION_STATE_IDLE"


def test_the_nginx_snippet_is_the_tested_configs() -> None:
    [snippet] = _blocks("nginx")
    config = (ROOT / "docs" / "deployment" / "nginx.conf").read_text()
    location = config[config.index("location /omni.v1.AgentService/") :]
    location = location[: location.index("\n    }\n") + 6]
    lines = iter(line.strip() for line in location.splitlines())
    for line in snippet.splitlines():
        # Each of the snippet's lines is the config's, in the config's order.
        assert line.strip() in lines, line
