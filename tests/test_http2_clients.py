"""The field's clients over HTTP/2 on the HTTP port (issue 42): connect-node
with ``httpVersion: "2"`` (Connect proto, Connect JSON, gRPC-Web), buf curl
with ``--http2-prior-knowledge`` and over TLS, and curl (``--http2``,
``--http2-prior-knowledge``) on the SSE routes, over h2c and over TLS.
Before, the port spoke HTTP/1.1 only and each of them failed."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import ssl
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from conftest import ServeProcess
from connect_serving import BUF, PROTO, SERVICE, json_documents, require_buf, serving
from polyglot.polyglot_builds import EXAMPLES, build_node

SCRIPT = """
import { createClient } from "@connectrpc/connect";
import { createConnectTransport, createGrpcWebTransport } from "@connectrpc/connect-node";
import { AgentService } from "%(gen)s";

const [baseUrl, protocol] = process.argv.slice(2);
const options = { baseUrl, httpVersion: "2" };
const transport = protocol === "grpc-web"
  ? createGrpcWebTransport(options)
  : createConnectTransport({ ...options, useBinaryFormat: protocol === "connect" });
const client = createClient(AgentService, transport);
let sessionId = "";
let events = 0;
let text = "";
for await (const response of client.run({ prompt: "over h2 " + protocol })) {
  sessionId = response.sessionId;
  events++;
  text += JSON.stringify(response, (_, v) => (typeof v === "bigint" ? String(v) : v));
}
const listed = await client.listSessions({});
console.log(JSON.stringify({ sessionId, events, sessions: listed.sessions.length,
                             echoed: text.includes("over h2 " + protocol) }));
"""


async def run(*cmd: str, env: dict[str, str] | None = None) -> str:
    proc = await asyncio.create_subprocess_exec(
        *cmd, env={**os.environ, **(env or {})},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), timeout=120)
    assert proc.returncode == 0, f"{cmd}: {err.decode()}"
    return out.decode()


@pytest.mark.parametrize("tls", [False, True], ids=["h2c", "h2-tls"])
@pytest.mark.parametrize("protocol", ["connect", "connect-json", "grpc-web"])
async def test_connect_node_http2(tmp_path: Path, certs: Path, protocol: str, tls: bool) -> None:
    client_js = Path(build_node()[1])
    script = tmp_path / "h2_client.mjs"
    script.write_text(SCRIPT % {"gen": (client_js.parent / "gen/omni/v1/agent_service_pb.js")})
    os.symlink(EXAMPLES / "node" / "node_modules", tmp_path / "node_modules")
    async with serving(tmp_path / "data", tls=certs if tls else None) as served:
        assert served.base_url.startswith("https://" if tls else "http://")
        out = await run(
            "node", str(script), served.base_url, protocol,
            env={"NODE_EXTRA_CA_CERTS": str(certs / "ca.pem")},
        )  # fmt: skip
    result = json.loads(out.strip().splitlines()[-1])
    assert result["events"] > 2 and result["sessions"] == 1 and result["echoed"]


@pytest.mark.parametrize("tls", [False, True], ids=["h2c", "h2-tls"])
@pytest.mark.parametrize("protocol", ["connect", "grpcweb"])
async def test_buf_curl_http2(tmp_path: Path, certs: Path, protocol: str, tls: bool) -> None:
    require_buf()
    async with serving(tmp_path / "data", tls=certs if tls else None) as served:
        base = [str(BUF), "curl", "--protocol", protocol, "--schema", str(PROTO)]
        base += ["--cacert", str(certs / "ca.pem")] if tls else ["--http2-prior-knowledge"]
        ran = await run(*base, "-d", '{"prompt": "buf over h2"}', served.url("Run"))
        listed = await run(*base, served.url("ListSessions"))
    messages = json_documents(ran)
    assert len(messages) > 2 and "buf over h2" in ran
    assert len(json_documents(listed)[0]["sessions"]) == 1
    assert SERVICE in served.url("Run")


@pytest.mark.parametrize(
    ("tls", "flag"),
    [(False, "--http2-prior-knowledge"), (False, "--http2"), (True, "--http2")],
    ids=["h2c-prior-knowledge", "h2c-upgrade", "h2-tls"],
)
async def test_curl_sse_over_http2(tmp_path: Path, certs: Path, tls: bool, flag: str) -> None:
    if shutil.which("curl") is None:
        pytest.skip("curl missing")
    async with serving(tmp_path / "data", tls=certs if tls else None) as served:
        common = ["curl", "-sS", "-N", flag, "--cacert", str(certs / "ca.pem")]
        # A GET first: over h2c, --http2 upgrades it (a POST with a body stays HTTP/1.1).
        version = await run(
            *common, "-o", "/dev/null", "-w", "%{http_version}",
            f"{served.base_url}/api/sessions",
        )  # fmt: skip
        assert version == "2"
        stream = await run(
            *common, "-X", "POST", "-H", "content-type: application/json",
            "-d", '{"prompt": "curl over h2"}', "-w", "\\n%{http_version} %{http_code}",
            f"{served.base_url}/v1/runs",
        )  # fmt: skip
    body, _, status = stream.rpartition("\n")
    expected = "1.1 200" if flag == "--http2" and not tls else "2 200"
    assert status == expected
    assert "curl over h2" in body and body.count("data:") > 2


def test_serve_tls_flags_put_the_http_port_on_https(
    serve_process: Callable[..., ServeProcess], certs: Path
) -> None:
    """``serve --tls-cert/--tls-key/--tls-client-ca``: the HTTP port as well as
    the gRPC port, https:// in the banner, a client certificate required."""
    served = serve_process(
        "--tls-cert", str(certs / "server.pem"), "--tls-key", str(certs / "server.key"),
        "--tls-client-ca", str(certs / "ca.pem"),
    )  # fmt: skip
    assert any("HTTP/SSE on https://" in line for line in served.banner), served.banner
    url = f"https://{served.http_address}/api/sessions"
    context = ssl.create_default_context(cafile=str(certs / "ca.pem"))
    with pytest.raises(httpx.HTTPError), httpx.Client(http2=True, verify=context) as http:
        http.get(url)  # no client certificate
    context.load_cert_chain(certs / "client.pem", certs / "client.key")
    with httpx.Client(http2=True, verify=context) as http:
        answer = http.get(url)
    assert answer.status_code == 200 and answer.http_version == "HTTP/2"
    with pytest.raises(httpx.HTTPError), httpx.Client() as plain:
        plain.get(f"http://{served.http_address}/api/sessions")
