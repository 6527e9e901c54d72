"""docs/sse.md's consumer program, run as written against a real server."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from pathlib import Path

from omni_grpc.server import ServerConfig, build_server
from omni_grpc.transport.sse.transport import SseConfig

DOC = Path(__file__).parents[1] / "docs" / "sse.md"


async def test_the_consumer_program_runs_against_the_server(tmp_path: Path) -> None:
    found = re.search(r"<!-- sse_consumer\.py[^>]*-->\n```python\n(.*?)```", DOC.read_text(), re.S)
    assert found is not None, "the consumer block is missing from docs/sse.md"
    program = tmp_path / "sse_consumer.py"
    program.write_text(found.group(1))
    config = ServerConfig(data_dir=tmp_path / "data", grpc=None,
                          http=SseConfig(port=0, auth_token="doc-token"))  # fmt: skip
    server = build_server(config)
    await server.start()
    try:
        http = server.describe()[0]
        base = re.search(r"http://[\d.]+:\d+", http)
        assert base is not None, http
        env = {**os.environ, "OMNI_HTTP": base.group(0), "OMNI_TOKEN": "doc-token"}
        proc = await asyncio.create_subprocess_exec(
            sys.executable, str(program), env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(proc.communicate(), 60)
    finally:
        await server.stop()
    assert proc.returncode == 0, err.decode()
    lines = out.decode().splitlines()
    texts = [
        json.loads(ln.removeprefix("text: "))["payload"] for ln in lines if ln.startswith("text: ")
    ]
    dialect = [ln.split(" ", 1)[0] for ln in lines if not ln.startswith("text: ")]
    # The reference stream: the prompt, then the demo engine's two answers.
    assert texts[0] == {"type": "text", "role": "user", "text": "hello", "stop_reason": "completed"}
    assert [t["role"] for t in texts[1:]] == ["assistant", "assistant"]
    assert texts[-1]["text"].startswith("You said 'hello'.")
    # Then the dialect run, which ends with exactly one done.
    assert dialect[0] == "thought" and {"message", "tool_call", "tool_result"} <= set(dialect)
    assert dialect[-1] == "done" and dialect.count("done") == 1
    assert "'status': 'completed'" in lines[-1]
