"""docs/a2a.md's example clients (Python and Node) and its curl block, run
against a real server that asks for approval."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import sys
from pathlib import Path

import grpc
import pytest
from a2a.types import a2a_pb2 as a2a
from a2a_support import http_url, start_server

from omni_grpc.vocabulary import ApprovalMode

ROOT = Path(__file__).resolve().parent.parent
NODE = shutil.which("node")
TOOLS = ROOT / "tools" / "node_modules"
EXPECTED = [
    "I'll list the session workspace first.",
    "[approving the tool call]",
    "You said 'list my files'. The workspace holds 0 entries.",
    "[TASK_STATE_COMPLETED]",
]


async def run(*command: str, cwd: Path = ROOT, env: dict[str, str] | None = None) -> list[str]:
    process = await asyncio.create_subprocess_exec(
        *command, cwd=cwd, env={**os.environ, **(env or {})},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == 0, err.decode()
    return out.decode().splitlines()


async def test_the_python_example_streams_and_approves(tmp_path: Path) -> None:
    server = await start_server(tmp_path / "data", approval_mode=ApprovalMode.ASK)
    try:
        lines = await run(
            sys.executable, "examples/a2a/client.py", http_url(server), "list my files"
        )
        assert lines == EXPECTED
    finally:
        await server.stop()


@pytest.mark.skipif(
    (NODE is None or not (TOOLS / "@a2a-js" / "sdk").is_dir())
    and not os.environ.get("OMNI_REQUIRE_TOOLCHAINS"),
    reason="node or tools/node_modules/@a2a-js/sdk is missing (scripts/setup installs them)",
)
async def test_the_javascript_example_streams_and_approves(tmp_path: Path) -> None:
    assert NODE is not None
    server = await start_server(tmp_path / "data", approval_mode=ApprovalMode.ASK)
    try:
        lines = await run(
            NODE, str(ROOT / "examples/a2a/client.cjs"), http_url(server), "list my files",
            cwd=ROOT / "tools", env={"NODE_PATH": str(TOOLS)},
        )  # fmt: skip
        assert lines == EXPECTED
    finally:
        await server.stop()


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
async def test_the_docs_curl_block_runs(tmp_path: Path) -> None:
    text = (ROOT / "docs" / "a2a.md").read_text()
    block = re.search(r"<!-- a2a-curl:.*?-->\n```bash\n(.*?)```", text, re.S)
    assert block is not None
    server = await start_server(tmp_path / "data")
    try:
        script = block.group(1).replace("localhost:8080", http_url(server).removeprefix("http://"))
        [out] = await run("bash", "-c", script)
        assert json.loads(out)["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    finally:
        await server.stop()


async def test_grpc_refusals_carry_grpc_codes(tmp_path: Path) -> None:
    server = await start_server(
        tmp_path / "data", approval_mode=ApprovalMode.ASK, client_modes=(ApprovalMode.ASK,)
    )
    try:
        assert server.grpc is not None
        async with grpc.aio.insecure_channel(server.grpc.address) as channel:
            get = channel.unary_unary(
                "/lf.a2a.v1.A2AService/GetTask",
                request_serializer=a2a.GetTaskRequest.SerializeToString,
                response_deserializer=a2a.Task.FromString,
            )
            send = channel.unary_unary(
                "/lf.a2a.v1.A2AService/SendMessage",
                request_serializer=a2a.SendMessageRequest.SerializeToString,
                response_deserializer=a2a.SendMessageResponse.FromString,
            )
            with pytest.raises(grpc.aio.AioRpcError) as missing:
                await get(a2a.GetTaskRequest(id="no-such:task-1"))
            request = a2a.SendMessageRequest(
                message=a2a.Message(message_id="m", role=a2a.ROLE_USER, parts=[a2a.Part(text="hi")])
            )
            request.metadata.update({"approvalMode": "allow-all"})
            with pytest.raises(grpc.aio.AioRpcError) as wider:
                await send(request)
        assert missing.value.code() == grpc.StatusCode.NOT_FOUND
        assert wider.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "allow-all is not allowed" in (wider.value.details() or "")
        assert await server.hub.list_sessions() == []
    finally:
        await server.stop()
