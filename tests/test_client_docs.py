"""docs/client.md's program, run as written against a real server."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from pathlib import Path

from conftest import ServerFactory

from omni_grpc.runtime.approvals import ApprovalMode

DOC = Path(__file__).parents[1] / "docs" / "client.md"


async def test_the_client_tour_runs_against_the_server(
    server_factory: ServerFactory, tmp_path: Path
) -> None:
    found = re.search(r"<!-- client_tour\.py[^>]*-->\n```python\n(.*?)```", DOC.read_text(), re.S)
    assert found is not None, "the program is missing from docs/client.md"
    program = tmp_path / "client_tour.py"
    program.write_text(found.group(1))
    server = await server_factory(approval_mode=ApprovalMode.ALLOW_ALL, auth_token="tour")
    assert server.grpc is not None
    env = {**os.environ, "OMNI_TARGET": server.grpc.address, "OMNI_TOKEN": "tour"}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(program), env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    lines = out.decode().splitlines()
    session = lines[3].removeprefix("session ")
    expected = [
        r"assistant: I'll list the session workspace first\.",
        r'approve list_workspace\(\{"path":"\."\}\)',
        r"assistant: You said 'what is in the workspace\?'\. The workspace holds 0 entries\.",
        r"session session-\S+",
        r"aborted a running task: True",
        r"abort reason: changed my mind",
        # The second task, replayed from the first task's last event to its idle.
        r"\d+ events since \S+, the last @task_state",
        r"\d+ messages recorded",
        rf"{re.escape(session)} \d+ messages, last event \S+",
        rf"refused: NOT_FOUND session '{re.escape(session)}' has no pending approval .*",
    ]
    assert len(lines) == len(expected), lines
    for line, pattern in zip(lines, expected, strict=True):
        assert re.fullmatch(pattern, line), (pattern, line)
    # The history the program counted is the one the server recorded.
    recorded = int(lines[7].split()[0])
    assert lines[8].split()[1] == str(recorded)
    assert recorded == (await server.hub.session_info(session)).message_count
