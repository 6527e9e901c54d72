"""Bearer auth, TLS and mTLS, health and reflection, against real servers."""

from __future__ import annotations

import subprocess
from pathlib import Path

import grpc
import pytest
from conftest import ServerFactory
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from omni_grpc.client import AgentClient, AgentError


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A throwaway CA, a server cert for 127.0.0.1 and a client cert, made here."""
    d = tmp_path_factory.mktemp("certs")
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "1",
            "-subj", "/CN=omni-grpc test CA", cwd=d)  # fmt: skip
    for name, ext in (
        ("server", "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth"),
        ("client", "extendedKeyUsage=clientAuth"),
    ):
        (d / f"{name}.ext").write_text(ext + "\n")
        openssl("req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr",
                "-subj", f"/CN={name}", cwd=d)  # fmt: skip
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                "-CAcreateserial", "-out", f"{name}.pem", "-days", "1",
                "-extfile", f"{name}.ext", cwd=d)  # fmt: skip
    return d


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
