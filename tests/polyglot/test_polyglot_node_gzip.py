"""connect-node sending gzip requests (``sendCompression: compressionGzip``,
every message compressed) over Connect proto, Connect JSON and gRPC-Web:
what Node's zlib writes is read whole by the server's inflater, unary
(``content-encoding``) and streaming (the envelope's flag), and a 3 MiB
prompt reaches the trace intact."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest
from connect_serving import serving

from omni_grpc.client import AgentClient
from omni_grpc.transport.connect import app as connect_app
from omni_grpc.transport.connect import inflate
from polyglot.polyglot_builds import EXAMPLES, build_node

PROMPT_BYTES = 3 * 1024 * 1024

SCRIPT = """
import { createClient } from "@connectrpc/connect";
import {
  compressionGzip, createConnectTransport, createGrpcWebTransport,
} from "@connectrpc/connect-node";
import { AgentService } from "%(gen)s";

const [addr, protocol, size] = process.argv.slice(2);
const options = {
  baseUrl: `http://${addr}`, httpVersion: "1.1",
  sendCompression: compressionGzip, compressMinBytes: 0,
};
const transport = protocol === "grpc-web"
  ? createGrpcWebTransport(options)
  : createConnectTransport({ ...options, useBinaryFormat: protocol === "connect" });
const client = createClient(AgentService, transport);
const prompt = "gzip " + "z".repeat(Number(size));
let sessionId = "";
let events = 0;
for await (const response of client.run({ prompt })) {
  sessionId = response.sessionId;
  events++;
}
const listed = await client.listSessions({});
console.log(JSON.stringify({ sessionId, events, sessions: listed.sessions.length }));
"""


@pytest.mark.parametrize("protocol", ["connect", "connect-json", "grpc-web"])
async def test_gzip_requests_from_connect_node_are_read_whole(
    tmp_path: Path, protocol: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    inflated: list[int] = []  # the size of every message the server inflated

    def counted(body: bytes, limit: int, step: int = inflate.STEP) -> bytes:
        out = inflate.inflate_gzip(body, limit, step)
        inflated.append(len(out))
        return out

    monkeypatch.setattr(connect_app, "inflate_gzip", counted)
    client_js = Path(build_node()[1])
    script = tmp_path / "gzip_client.mjs"
    script.write_text(SCRIPT % {"gen": (client_js.parent / "gen/omni/v1/agent_service_pb.js")})
    os.symlink(EXAMPLES / "node" / "node_modules", tmp_path / "node_modules")
    async with serving(tmp_path / "data") as served:
        proc = await asyncio.create_subprocess_exec(
            "node", str(script), served.base_url.removeprefix("http://"), protocol,
            str(PROMPT_BYTES), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(proc.communicate(), timeout=120)
        assert proc.returncode == 0, err.decode()
        result = json.loads(out.decode().strip().splitlines()[-1])
        assert result["events"] > 2 and result["sessions"] == 1
        async with AgentClient(served.grpc_target) as agent:
            history = [m async for m in agent.history(result["sessionId"])]
    prompts = [m.text.text for m in history if m.WhichOneof("payload") == "text"]
    assert "gzip " + "z" * PROMPT_BYTES in prompts
    # Run's request came compressed (its 3 MiB prompt, inflated in a worker thread).
    assert max(inflated) > PROMPT_BYTES, inflated
