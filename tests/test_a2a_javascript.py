"""The official A2A JavaScript SDK (@a2a-js/sdk, from tools/) drives the agent
in Node on each binding: card, stream, a dropped connection, resubscribe, the
approval answered, GetTask, ListTasks, cancel; and with the lossless extension
the OmniMessages it received equal the trace byte for byte."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from a2a_support import http_url, start_server

from omni_grpc.transport.a2a import extension
from omni_grpc.vocabulary import ApprovalMode

ROOT = Path(__file__).resolve().parent.parent
TOOLS = ROOT / "tools" / "node_modules"
NODE = shutil.which("node")
pytestmark = pytest.mark.skipif(
    (NODE is None or not (TOOLS / "@a2a-js" / "sdk").is_dir())
    and not os.environ.get("OMNI_REQUIRE_TOOLCHAINS"),
    reason="node or tools/node_modules/@a2a-js/sdk is missing (scripts/setup installs them)",
)


def carried(events: list[dict[str, Any]]) -> list[str]:
    """The OmniMessage texts the extension carried: the snapshot's artifact, then chunks."""
    out: list[str] = []
    for event in events:
        artifacts = event.get("task", {}).get("artifacts", [])
        if "artifactUpdate" in event:
            artifacts = [event["artifactUpdate"]["artifact"]]
        for artifact in artifacts:
            if artifact["artifactId"] == extension.ARTIFACT_ID:
                out += [part["data"]["json"] for part in artifact["parts"]]
    return out


@pytest.mark.parametrize("binding", ["JSONRPC", "GRPC", "HTTP+JSON"])
async def test_the_javascript_sdk_runs_the_whole_task_life(tmp_path: Path, binding: str) -> None:
    assert NODE is not None
    server = await start_server(tmp_path / "data", approval_mode=ApprovalMode.ASK)
    try:
        process = await asyncio.create_subprocess_exec(
            NODE, str(ROOT / "tests" / "js" / "a2a_client.cjs"), http_url(server), binding,
            extension.URI, cwd=ROOT / "tools", env={**os.environ, "NODE_PATH": str(TOOLS)},
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(process.communicate(), 120)
        assert process.returncode == 0, err.decode()
        steps = {s["step"]: s for s in map(json.loads, out.decode().splitlines())}
        card = steps["card"]["card"]
        assert binding in {i["protocolBinding"] for i in card["supportedInterfaces"]}
        asked, resumed = steps["asked"]["events"], steps["resumed"]["events"]
        assert asked[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
        assert resumed[0]["task"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
        assert resumed[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
        got = steps["got"]["task"]
        assert got["status"]["state"] == "TASK_STATE_COMPLETED"
        assert [t["id"] for t in steps["listed"]["response"]["tasks"]] == [got["id"]]
        canceled = steps["canceled"]["task"]
        assert canceled["status"]["state"] == "TASK_STATE_CANCELED"
        assert canceled["contextId"] == got["contextId"]
        # Lossless: what the resumed stream carried (snapshot, then chunks) and
        # what GetTask returned are the trace's lines, byte for byte.
        info = await server.hub.session_info(got["contextId"])
        assert info.trace_path is not None
        trace = Path(info.trace_path).read_bytes().splitlines()
        whole = [t.encode() for t in carried(resumed) if '"type":"partial_' not in t]
        first_task = trace[1 : 1 + len(whole)]
        assert whole == first_task
        assert [t.encode() for t in carried([{"task": got}])] == [
            t.encode() for t in carried(resumed)
        ]
        assert carried(asked) == carried(resumed)[: len(carried(asked))]
        recorded = [m async for m in await server.hub.history(got["contextId"])]
        assert recorded[-1].HasField("abort")  # the canceled second task
    finally:
        await server.stop()
