"""Bearer auth, TLS and mTLS, health and reflection, against real servers."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from conftest import ServerFactory
from google.protobuf import descriptor_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from omni_grpc.client import AgentClient, AgentError

ROOT = Path(__file__).resolve().parent.parent
BUF = ROOT / "tools" / "node_modules" / ".bin" / "buf"


async def one_run(client: AgentClient) -> str:
    async for event in client.run("secure hello"):
        if event.is_task_end:
            return event.session_id
    raise AssertionError("the stream ended without task_state idle")


async def test_bearer_token_is_required_on_every_rpc_but_health(
    server_factory: ServerFactory,
) -> None:
    server = await server_factory(auth_token="s3cret")
    assert server.grpc is not None
    target = server.grpc.address
    for token in (None, "wrong"):
        async with AgentClient(target, token=token) as client:
            with pytest.raises(AgentError) as refused:
                await one_run(client)
            assert refused.value.code == grpc.StatusCode.UNAUTHENTICATED
            with pytest.raises(AgentError) as listing:
                await client.list_sessions()
            assert listing.value.code == grpc.StatusCode.UNAUTHENTICATED
    assert "missing bearer token" in str(refused.value) or "invalid" in str(refused.value)
    async with AgentClient(target, token="s3cret") as client:
        session_id = await one_run(client)
        assert [s.session_id for s in await client.list_sessions()] == [session_id]
    async with grpc.aio.insecure_channel(target) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for service in ("", "omni.v1.AgentService"):
            reply = await health.Check(health_pb2.HealthCheckRequest(service=service))
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
        # Reflection is not public: it needs the token like the service does.
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as reflect:
            async for _ in stub.ServerReflectionInfo(
                iter([reflection_pb2.ServerReflectionRequest(list_services="")])
            ):
                pass
        assert reflect.value.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_reflection_lists_the_services(grpc_target: str) -> None:
    async with grpc.aio.insecure_channel(grpc_target) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        responses = [r async for r in stub.ServerReflectionInfo(iter([request]))]
        names = {s.name for s in responses[0].list_services_response.service}
        assert {"omni.v1.AgentService", "grpc.health.v1.Health"} <= names
        symbol = reflection_pb2.ServerReflectionRequest(file_containing_symbol="omni.v1.RunRequest")
        [found] = [r async for r in stub.ServerReflectionInfo(iter([symbol]))]
        assert found.file_descriptor_response.file_descriptor_proto


async def _reflect(
    channel: grpc.aio.Channel, service: str, request: reflection_pb2.ServerReflectionRequest
) -> reflection_pb2.ServerReflectionResponse:
    """One reflection exchange on ``service``, by method path: v1 and v1alpha
    share their messages' fields, so v1alpha's classes encode a v1 request."""
    call = channel.stream_stream(
        f"/{service}/ServerReflectionInfo",
        request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
        response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
    )
    [response] = [r async for r in call(iter([request]))]
    return response


@pytest.mark.parametrize("version", ["v1", "v1alpha"])
async def test_reflection_answers_as_v1_and_v1alpha(grpc_target: str, version: str) -> None:
    service = f"grpc.reflection.{version}.ServerReflection"
    async with grpc.aio.insecure_channel(grpc_target) as channel:
        listed = await _reflect(channel, service, reflection_pb2.ServerReflectionRequest(
            list_services=""))  # fmt: skip
        names = {s.name for s in listed.list_services_response.service}
        assert names == {
            "omni.v1.AgentService", "grpc.health.v1.Health", "lf.a2a.v1.A2AService",
            "grpc.reflection.v1.ServerReflection", "grpc.reflection.v1alpha.ServerReflection",
        }  # fmt: skip
        # Every listed service resolves to its file, the reflection services too.
        for name in sorted(names):
            found = await _reflect(channel, service, reflection_pb2.ServerReflectionRequest(
                file_containing_symbol=name))  # fmt: skip
            assert found.WhichOneof("message_response") == "file_descriptor_response", name
            files = [
                descriptor_pb2.FileDescriptorProto.FromString(raw)
                for raw in found.file_descriptor_response.file_descriptor_proto
            ]
            package, _, short = name.rpartition(".")
            owners = [f.name for f in files
                      if f.package == package and short in [s.name for s in f.service]]  # fmt: skip
            assert len(owners) == 1, (name, [f.name for f in files])


def _readme_block(marker: str, language: str) -> str:
    text = (ROOT / "README.md").read_text()
    found = re.search(re.escape(marker) + rf".*?```{language}\n(.*?)```", text, re.S)
    assert found is not None, f"no {language} block after {marker!r} in README.md"
    return found.group(1)


def _readme_commands(marker: str, target: str) -> list[list[str]]:
    """The README's shell commands after ``marker``, aimed at ``target``."""
    block = _readme_block(marker, "bash").replace("\\\n", " ")
    lines = [line for line in block.splitlines() if line.strip()]
    return [
        [word.replace("127.0.0.1:50051", target).replace("TOKEN", "tok")
         for word in shlex.split(line)]
        for line in lines
    ]  # fmt: skip


def _require_buf() -> None:
    if not BUF.exists():
        if os.environ.get("OMNI_REQUIRE_TOOLCHAINS") == "1":
            pytest.fail("buf missing: scripts/setup installs it (tools/)", pytrace=False)
        pytest.skip("buf missing: scripts/setup installs it (tools/)")


def _buf(command: list[str]) -> Any:
    """The JSON buf curl printed: one document, or a list for a stream."""
    assert command[0] == "tools/node_modules/.bin/buf"
    done = subprocess.run([str(BUF), *command[1:]], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, (command, done.stderr)
    decoder, text, documents, at = json.JSONDecoder(), done.stdout, [], 0
    while text[at:].strip():
        document, at = decoder.raw_decode(text, len(text) - len(text[at:].lstrip()))
        documents.append(document)
    return documents[0] if len(documents) == 1 else documents


def test_the_readmes_buf_curl_commands_work(serve_process: Callable[..., Any]) -> None:
    _require_buf()
    served = serve_process("--no-http")
    listing, run = _readme_commands("<!-- buf-curl:", served.grpc_address)
    assert _buf(listing) == {}
    events = _buf(run)  # each streamed response is its own JSON document
    assert events[-1]["event"] == {"taskState": {"state": "SESSION_STATE_IDLE", "queued": "0"}}
    [session] = _buf(listing)["sessions"]
    assert session["sessionId"] == events[0]["sessionId"]


def test_buf_curl_speaking_only_reflection_v1_calls_the_service(
    serve_process: Callable[..., Any],
) -> None:
    """A real client that knows only grpc.reflection.v1, with a token (which
    reflection needs as well: --reflect-header), as the README shows."""
    _require_buf()
    served = serve_process("--no-http", "--auth-token", "tok")
    [listing] = _readme_commands("<!-- buf-curl-token:", served.grpc_address)
    v1_only = [*listing[:1], "curl", "--reflect-protocol", "grpc-v1", *listing[2:]]
    assert _buf(v1_only) == {}
    methods = _buf_lines([*v1_only[:-1], "--list-methods", v1_only[-1].rsplit("/", 2)[0]])
    assert "omni.v1.AgentService/Run" in methods
    health_url = v1_only[-1].replace(
        "omni.v1.AgentService/ListSessions", "grpc.health.v1.Health/List"
    )
    assert _buf([*v1_only[:-1], health_url]) == {
        "statuses": {"": {"status": "SERVING"}, "omni.v1.AgentService": {"status": "SERVING"}}
    }
    # Without --reflect-header the schema cannot even be fetched.
    without = [w for w in v1_only if w != "--reflect-header"]
    without.remove("authorization: Bearer tok")
    refused = subprocess.run([str(BUF), *without[1:]], capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0


def _buf_lines(command: list[str]) -> list[str]:
    done = subprocess.run([str(BUF), *command[1:]], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, (command, done.stderr)
    return done.stdout.split()


def test_the_readmes_reflection_client_runs_with_a_token(
    serve_process: Callable[..., Any],
) -> None:
    served = serve_process("--no-http", "--auth-token", "tok")
    code = _readme_block("<!-- reflection-client:", "python")
    code = code.replace("127.0.0.1:50051", served.grpc_address).replace('"TOKEN"', '"tok"')
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "'taskState': {'state': 'SESSION_STATE_IDLE'" in lines[-2]
    assert lines[-1].startswith("{'sessions': [{'sessionId': 'session-")


async def test_health_list_names_every_service_it_checks(grpc_target: str) -> None:
    async with grpc.aio.insecure_channel(grpc_target) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        listed = await health.List(health_pb2.HealthListRequest())
        assert dict(listed.statuses) == {
            name: health_pb2.HealthCheckResponse(status=health_pb2.HealthCheckResponse.SERVING)
            for name in ("", "omni.v1.AgentService")
        }
        for name in listed.statuses:
            checked = await health.Check(health_pb2.HealthCheckRequest(service=name))
            assert checked.status == listed.statuses[name].status


async def test_tls_serves_clients_that_trust_the_ca(
    server_factory: ServerFactory, certs: Path
) -> None:
    server = await server_factory(tls_cert=certs / "server.pem", tls_key=certs / "server.key")
    assert server.grpc is not None and server.grpc.describe().startswith("gRPC on grpcs://")
    async with AgentClient(server.grpc.address, tls_ca=certs / "ca.pem") as client:
        assert await one_run(client)
    # A plaintext client cannot talk to it.
    async with AgentClient(server.grpc.address) as plain:
        with pytest.raises(AgentError) as refused:
            await plain.list_sessions()
        assert refused.value.code == grpc.StatusCode.UNAVAILABLE


async def test_mtls_requires_a_client_certificate(
    server_factory: ServerFactory, certs: Path
) -> None:
    server = await server_factory(
        tls_cert=certs / "server.pem",
        tls_key=certs / "server.key",
        tls_client_ca=certs / "ca.pem",
    )
    assert server.grpc is not None
    async with AgentClient(server.grpc.address, tls_ca=certs / "ca.pem") as anonymous:
        with pytest.raises(AgentError) as refused:
            await anonymous.list_sessions()
        assert refused.value.code == grpc.StatusCode.UNAVAILABLE
    async with AgentClient(
        server.grpc.address,
        tls_ca=certs / "ca.pem",
        tls_cert=certs / "client.pem",
        tls_key=certs / "client.key",
    ) as client:
        assert await one_run(client)


async def test_bad_tls_settings_fail_before_serving(server_factory: ServerFactory) -> None:
    with pytest.raises(ValueError, match="go together"):
        await server_factory(tls_cert=Path("only-a-cert.pem"))
    with pytest.raises(ValueError, match="needs --tls-cert"):
        await server_factory(tls_client_ca=Path("ca.pem"))
