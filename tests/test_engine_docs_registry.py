"""docs/engines.md "Registering a named engine": the embedding script, run for real."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from omni_grpc.client import AgentClient

DOC = Path(__file__).parents[1] / "docs" / "engines.md"


def block(name: str) -> str:
    pattern = rf"<!-- {re.escape(name)}[^>]*-->\n```python\n(.*?)```"
    match = re.search(pattern, DOC.read_text(), re.S)
    assert match is not None, f"the {name} block is missing from docs/engines.md"
    return match.group(1)


async def test_a_registered_name_serves_when_the_server_is_built_in_python(
    tmp_path: Path,
) -> None:
    (tmp_path / "echo_engine.py").write_text(block("echo_engine.py"))
    (tmp_path / "serve_echo.py").write_text(block("serve_echo.py"))
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "PORT": "0"}
    proc = subprocess.Popen(
        [sys.executable, "serve_echo.py"], cwd=tmp_path, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        found = re.fullmatch(r"serving gRPC on grpc://(127\.0\.0\.1:\d+)\n", line)
        assert found is not None, (line, proc.stderr.read() if proc.stderr else "")
        async with AgentClient(found.group(1)) as client:
            texts = []
            async for event in client.run("hello registry"):
                if event.kind == "text":
                    assert event.message is not None
                    texts.append(event.message.text.text)
                if event.is_task_end:
                    break
        # The prompt (the user's text), then the engine's echo of it.
        assert texts == ["hello registry", "hello registry "]
    finally:
        # Ctrl-C: the script stops the server and exits cleanly.
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=30)
    assert (proc.returncode, stderr) == (0, "")
