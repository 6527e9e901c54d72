"""OpenTelemetry spans from real servers: the span tree of a run, and W3C context
carried in from clients and out to the engines' upstreams.

Each server gets its own SDK tracer provider with the in-memory exporter
(nothing global is installed). The OTLP test starts ``omni-grpc serve`` with
the standard variables only, against a real OTLP/HTTP receiver on loopback.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from fakes.openai_server import FakeOpenAI, text_reply, tool_calls_reply
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from omni_grpc.server import OmniServer, ServerConfig, build_server
from omni_grpc.transport.grpc import GrpcConfig
from omni_grpc.transport.sse.transport import SseConfig, SseTransport
from omni_grpc_proto.omni.v1 import agent_service_pb2 as pb
from omni_grpc_proto.omni.v1 import agent_service_pb2_grpc

# A client's own span, sent as W3C traceparent.
CLIENT_TRACE = secrets.randbits(128) | 1
CLIENT_SPAN = secrets.randbits(64) | 1
TRACEPARENT = f"00-{CLIENT_TRACE:032x}-{CLIENT_SPAN:016x}-01"


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


Start = Callable[..., Awaitable[OmniServer]]


@pytest.fixture
async def start(tmp_path: Path, exporter: InMemorySpanExporter) -> AsyncIterator[Start]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    servers: list[OmniServer] = []

    async def start(**overrides: Any) -> OmniServer:
        config = ServerConfig(
            data_dir=tmp_path / f"data{len(servers)}",
            grpc=GrpcConfig(port=0),
            http=SseConfig(port=0),
            shutdown_grace=1.0,
            tracer_provider=provider,
            **overrides,
        )
        server = build_server(config)
        await server.start()
        servers.append(server)
        return server

    yield start
    for server in reversed(servers):
        await server.stop()
    provider.shutdown()


def address(server: OmniServer) -> str:
    assert server.grpc is not None
    return server.grpc.address


async def run_over_grpc(server: OmniServer, prompt: str) -> str:
    async with grpc.aio.insecure_channel(address(server)) as channel:
        stub = agent_service_pb2_grpc.AgentServiceStub(channel)
        session_id = ""
        async for response in stub.Run(
            pb.RunRequest(prompt=prompt), metadata=(("traceparent", TRACEPARENT),)
        ):
            session_id = response.session_id
        return session_id


async def spans_when(
    exporter: InMemorySpanExporter, done: Callable[[Sequence[ReadableSpan]], bool]
) -> list[ReadableSpan]:
    """The finished spans, once ``done`` says they are all there."""

    async def wait() -> list[ReadableSpan]:
        while not done(spans := list(exporter.get_finished_spans())):
            await asyncio.sleep(0.01)
        return spans

    return await asyncio.wait_for(wait(), 10)


def named(spans: Sequence[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


def parent_id(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def span_id(span: ReadableSpan) -> int:
    assert span.context is not None
    return span.context.span_id


def trace_id(span: ReadableSpan) -> int:
    assert span.context is not None
    return span.context.trace_id


async def test_one_run_with_one_tool_call_is_one_tree_under_the_client_span(
    start: Start, exporter: InMemorySpanExporter
) -> None:
    server = await start()
    session_id = await run_over_grpc(server, "list the workspace")
    rpc_name = "omni.v1.AgentService/Run"
    spans = await spans_when(exporter, lambda s: bool(named(s, rpc_name)))

    [rpc] = named(spans, rpc_name)
    [run] = named(spans, "omni.run")
    requests = named(spans, "omni.model_request")
    [tool] = named(spans, "omni.tool_call")
    # The client's traceparent is the RPC span's parent, and everything is one trace.
    assert rpc.kind is SpanKind.SERVER
    assert parent_id(rpc) == CLIENT_SPAN
    assert rpc.parent is not None and rpc.parent.is_remote
    assert {trace_id(s) for s in spans} == {CLIENT_TRACE}
    assert rpc.attributes is not None and rpc.attributes["rpc.grpc.status_code"] == 0
    # run -> two model requests and one tool call, each a child of the run.
    assert parent_id(run) == span_id(rpc)
    assert run.attributes is not None
    assert run.attributes["omni.session_id"] == session_id
    assert run.attributes["omni.status"] == "completed"
    assert len(requests) == 2
    assert all(parent_id(r) == span_id(run) for r in requests)
    assert all(r.attributes is not None and r.attributes["omni.outcome"] == "completed"
               for r in requests)  # fmt: skip
    assert parent_id(tool) == span_id(run)
    assert tool.attributes is not None
    assert tool.attributes["omni.tool.name"] == "list_workspace"
    assert tool.attributes["omni.approval"] == "allow"
    assert tool.attributes["omni.outcome"] == "completed"
    # Children start and end within the run.
    for child in (*requests, tool):
        assert run.start_time is not None and run.end_time is not None
        assert child.start_time is not None and child.end_time is not None
        assert run.start_time <= child.start_time <= child.end_time <= run.end_time
    assert len(spans) == 5


async def test_an_http_traceparent_parents_the_request_and_the_run(
    start: Start, exporter: InMemorySpanExporter
) -> None:
    server = await start()
    http = next(t for t in server.transports if isinstance(t, SseTransport))
    async with (
        httpx.AsyncClient(base_url=http.url, timeout=10) as client,
        client.stream(
            "POST", "/v1/runs", json={"prompt": "hi"}, headers={"traceparent": TRACEPARENT}
        ) as response,
    ):
        assert response.status_code == 200
        body = b"".join([chunk async for chunk in response.aiter_bytes()])
    assert b"event: done" in body
    spans = await spans_when(exporter, lambda s: bool(named(s, "POST /v1/runs")))
    [request] = named(spans, "POST /v1/runs")
    [run] = named(spans, "omni.run")
    assert request.kind is SpanKind.SERVER
    assert parent_id(request) == CLIENT_SPAN
    assert parent_id(run) == span_id(request)
    assert request.attributes is not None
    assert request.attributes["http.route"] == "/v1/runs"
    assert request.attributes["http.response.status_code"] == 200
    assert {trace_id(s) for s in spans} == {CLIENT_TRACE}


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as server:
        yield server


async def test_the_openai_engine_sends_the_model_request_span_upstream(
    start: Start, exporter: InMemorySpanExporter, fake: FakeOpenAI
) -> None:
    fake.script(
        tool_calls_reply([("call_1", "list_directory", '{"path": "."}')]),
        text_reply("Empty."),
    )
    server = await start(engine="openai", engine_options={"base_url": fake.base_url, "model": "m"})
    await run_over_grpc(server, "what is here?")
    spans = await spans_when(exporter, lambda s: bool(named(s, "omni.v1.AgentService/Run")))
    requests = sorted(named(spans, "omni.model_request"), key=lambda s: s.start_time or 0)
    assert len(requests) == len(fake.requests) == 2
    for sent, span in zip(fake.requests, requests, strict=True):
        assert sent.headers["traceparent"] == f"00-{CLIENT_TRACE:032x}-{span_id(span):016x}-01"
    assert named(spans, "omni.tool_call")[0].attributes is not None


async def test_the_grpc_upstream_engine_continues_the_trace_upstream(
    start: Start, exporter: InMemorySpanExporter
) -> None:
    upstream = await start()
    gateway = await start(engine=f"grpc://{address(upstream)}")
    await run_over_grpc(gateway, "hello")
    runs = "omni.run"
    spans = await spans_when(exporter, lambda s: len(named(s, runs)) == 2 and len(
        named(s, "omni.v1.AgentService/Run")) == 2)  # fmt: skip
    gateway_rpc = next(s for s in named(spans, "omni.v1.AgentService/Run")
                       if parent_id(s) == CLIENT_SPAN)  # fmt: skip
    gateway_run = next(s for s in named(spans, runs) if parent_id(s) == span_id(gateway_rpc))
    upstream_rpc = next(s for s in named(spans, "omni.v1.AgentService/Run") if s != gateway_rpc)
    upstream_run = next(s for s in named(spans, runs) if s != gateway_run)
    # The gateway's run made the upstream call; the upstream's run hangs below it.
    assert parent_id(upstream_rpc) == span_id(gateway_run)
    assert parent_id(upstream_run) == span_id(upstream_rpc)
    assert {trace_id(s) for s in spans} == {CLIENT_TRACE}


# ---- the standard variables, a real OTLP receiver --------------------------------------


class _Receiver(BaseHTTPRequestHandler):
    bodies: list[bytes]

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length", "0"))
        self.server.bodies.append((self.path, self.rfile.read(length)))  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.end_headers()

    def log_message(self, *_args: Any) -> None:
        pass


def test_serve_exports_spans_over_otlp_when_the_standard_variables_say_so(
    serve_process: Callable[..., Any],
) -> None:
    receiver = ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    receiver.bodies = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=receiver.serve_forever, daemon=True)
    thread.start()
    try:
        env = {
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{receiver.server_port}",
            "OTEL_SERVICE_NAME": "omni-under-test",
        }
        served = serve_process("--no-http", env=env)
        asyncio.run(_plain_run(served.grpc_address))
        served.process.terminate()  # shutdown flushes the batch
        assert served.process.wait(20) == 0
    finally:
        receiver.shutdown()
    names: set[str] = set()
    services: set[str] = set()
    for path, body in receiver.bodies:  # type: ignore[attr-defined]
        assert path == "/v1/traces"
        request = ExportTraceServiceRequest.FromString(body)
        for resource_spans in request.resource_spans:
            for attribute in resource_spans.resource.attributes:
                if attribute.key == "service.name":
                    services.add(attribute.value.string_value)
            for scope in resource_spans.scope_spans:
                names.update(span.name for span in scope.spans)
    assert services == {"omni-under-test"}
    assert {"omni.v1.AgentService/Run", "omni.run", "omni.model_request",
            "omni.tool_call"} <= names  # fmt: skip


class _TraceCollector(trace_service_pb2_grpc.TraceServiceServicer):  # type: ignore[misc]
    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []

    async def Export(
        self, request: ExportTraceServiceRequest, context: grpc.aio.ServicerContext
    ) -> ExportTraceServiceResponse:
        self.requests.append(request)
        return ExportTraceServiceResponse()


async def test_serve_exports_over_otlp_grpc_too(serve_process: Callable[..., Any]) -> None:
    collector = _TraceCollector()
    receiver = grpc.aio.server()
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(collector, receiver)
    port = receiver.add_insecure_port("127.0.0.1:0")
    await receiver.start()
    try:
        env = {
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"http://127.0.0.1:{port}",
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc",
        }
        served = await asyncio.to_thread(serve_process, "--no-http", env=env)
        await _plain_run(served.grpc_address)
        served.process.terminate()
        assert await asyncio.to_thread(served.process.wait, 20) == 0
    finally:
        await receiver.stop(0)
    names = {
        span.name
        for request in collector.requests
        for resource_spans in request.resource_spans
        for scope in resource_spans.scope_spans
        for span in scope.spans
    }
    assert {"omni.v1.AgentService/Run", "omni.run", "omni.tool_call"} <= names


async def _plain_run(target: str) -> None:
    async with grpc.aio.insecure_channel(target) as channel:
        stub = agent_service_pb2_grpc.AgentServiceStub(channel)
        async for _ in stub.Run(pb.RunRequest(prompt="hi")):
            pass


def test_no_variables_no_sdk_provider(tmp_path: Path) -> None:
    code = (
        "from omni_grpc.observability import tracing\n"
        "assert tracing.configure_from_env() is False\n"
        "assert tracing.sdk_provider() is None\n"
        "assert tracing.configure_from_env({'OTEL_TRACES_EXPORTER': 'none'}) is False\n"
        "assert tracing.configure_from_env({'OTEL_SDK_DISABLED': 'true',"
        " 'OTEL_TRACES_EXPORTER': 'console'}) is False\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=tmp_path)
