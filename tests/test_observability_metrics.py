"""Prometheus metrics, scraped from a real server after real runs.

Every scrape goes over HTTP to ``/metrics`` and is read with
``prometheus_client``'s own text parser; the assertions are on how much each
series moved between two scrapes, so they hold whatever ran before.
"""

from __future__ import annotations

import asyncio
import logging
import re
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from fakes.openai_server import FakeOpenAI, error_reply, text_reply
from prometheus_client.parser import text_string_to_metric_families

from omni_grpc.client import AgentClient, AgentError
from omni_grpc.observability.event_log import ObservedEventLog
from omni_grpc.observability.metrics import ServerMetrics
from omni_grpc.observability.observer import HubTelemetry
from omni_grpc.runtime import bodies
from omni_grpc.runtime.approvals import ApprovalMode
from omni_grpc.runtime.memory_log import MemoryEventLog
from omni_grpc.server import OmniServer, ServerConfig, build_server
from omni_grpc.transport.grpc import GrpcConfig
from omni_grpc.transport.sse.transport import SseConfig, SseTransport

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]
RUN = {"grpc_type": "server_stream", "grpc_service": "omni.v1.AgentService", "grpc_method": "Run"}


def parse(text: str) -> Samples:
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[(s.name, frozenset(s.labels.items()))] = s.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def moved(before: Samples, after: Samples, name: str, **labels: str) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


Start = Callable[..., Awaitable[OmniServer]]


@pytest.fixture
async def start(tmp_path: Path) -> AsyncIterator[Start]:
    servers: list[OmniServer] = []

    async def start(token: str | None = None, **overrides: Any) -> OmniServer:
        http = overrides.pop("http", SseConfig(port=0, auth_token=token))
        config = ServerConfig(
            data_dir=tmp_path / f"data{len(servers)}",
            grpc=GrpcConfig(port=0, auth_token=token),
            http=http,
            shutdown_grace=1.0,
            **overrides,
        )
        server = build_server(config)
        await server.start()
        servers.append(server)
        return server

    yield start
    for server in reversed(servers):
        await server.stop()


def http_url(server: OmniServer) -> str:
    transport = next(t for t in server.transports if isinstance(t, SseTransport))
    return transport.url


async def scrape(server: OmniServer, token: str | None = None) -> Samples:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    async with httpx.AsyncClient() as http:
        response = await http.get(http_url(server) + "/metrics", headers=headers)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    return parse(response.text)


def client(server: OmniServer, token: str | None = None) -> AgentClient:
    assert server.grpc is not None
    return AgentClient(server.grpc.address, token=token)


async def test_an_approval_wait_that_expires_is_counted_as_timeout(start: Start) -> None:
    from omni_grpc.runtime.limits import Limits

    server = await start(approval_mode=ApprovalMode.ASK, limits=Limits(approval_wait=0.2))
    before = await scrape(server)
    async with client(server) as agent:
        kinds = [event.kind async for event in agent.run("nobody answers")]
    assert "@approval_request" in kinds and "approval_decision" not in kinds
    after = await scrape(server)
    assert moved(before, after, "omni_approval_wait_seconds_count", decision="timeout") == 1
    assert moved(before, after, "omni_approval_wait_seconds_count", decision="deny") == 0
    assert value(after, "omni_approvals_waiting") == 0.0


async def test_a_run_with_an_approval_and_an_abort_move_the_counters(start: Start) -> None:
    server = await start(approval_mode=ApprovalMode.ASK)
    before = await scrape(server)
    async with client(server) as agent:
        # Run 1: the demo engine's tool call waits for an approval we give.
        received = 0
        waiting_seen = -1.0
        async for event in agent.run("list the workspace"):
            received += 1
            if event.kind == "@approval_request":
                waiting_seen = value(await scrape(server), "omni_approvals_waiting")
                call_id = event.server_event.approval_request.tool_call.tool_call.tool_call_id
                await agent.approve(event.session_id, call_id, "allow")
        # Run 2: aborted while it waits for its approval.
        stream = agent.run("and again")
        async for event in stream:
            received += 1
            if event.kind == "@approval_request":
                assert await agent.abort(event.session_id, "changed my mind")
    after = await scrape(server)

    assert waiting_seen == 1.0
    assert value(after, "omni_approvals_waiting") == 0.0
    assert moved(before, after, "omni_runs_started_total") == 2
    assert moved(before, after, "omni_runs_finished_total", status="completed") == 1
    assert moved(before, after, "omni_runs_finished_total", status="aborted") == 1
    assert moved(before, after, "omni_runs_finished_total", status="failed") == 0
    assert moved(before, after, "omni_aborts_total", kind="user") == 1
    assert value(after, "omni_runs_in_progress") == 0.0
    assert moved(before, after, "omni_approval_wait_seconds_count", decision="allow") == 1
    # Nobody denied the call the abort ended: its wait is counted as aborted.
    assert moved(before, after, "omni_approval_wait_seconds_count", decision="aborted") == 1
    assert moved(before, after, "omni_approval_wait_seconds_count", decision="deny") == 0
    # One subscriber (each Run call) saw every event of its task.
    assert moved(before, after, "omni_events_delivered_total") == received
    assert moved(before, after, "grpc_server_msg_sent_total", **RUN) == received
    assert moved(before, after, "grpc_server_started_total", **RUN) == 2
    assert moved(before, after, "grpc_server_handled_total", **RUN, grpc_code="OK") == 2
    assert moved(before, after, "grpc_server_handling_seconds_count", **RUN) == 2
    assert moved(before, after, "omni_run_first_event_seconds_count") == 2
    # The demo turn is two model requests; the aborted run ends inside its first
    # (the approval comes before that request's request_end).
    demo = {"engine": "demo"}
    assert moved(before, after, "omni_engine_request_duration_seconds_count", **demo,
                 outcome="completed") == 2  # fmt: skip
    assert moved(before, after, "omni_engine_request_duration_seconds_count", **demo,
                 outcome="aborted") == 1  # fmt: skip


async def test_published_and_trace_bytes_match_what_the_session_holds(start: Start) -> None:
    server = await start()
    before = await scrape(server)
    async with client(server) as agent:
        events = [e async for e in agent.run("hello")]
    after = await scrape(server)
    session_id = events[0].session_id
    traces = list((server.data_dir or Path()).glob(f"traces/*/{session_id}_*.jsonl"))
    assert len(traces) == 1
    assert moved(before, after, "omni_trace_written_bytes_total") == traces[0].stat().st_size
    # Everything but the two unicast events is published (and buffered).
    published = moved(before, after, "omni_events_published_total")
    assert published == len(events)
    assert value(after, "omni_event_log_buffered_events") == published
    assert value(after, "omni_event_logs") == 1


async def test_grpc_codes_are_the_ecosystem_names(start: Start) -> None:
    token = secrets.token_hex(16)
    server = await start(token=token)
    before = await scrape(server, token)
    async with client(server, token) as agent:
        with pytest.raises(AgentError):
            await agent.abort("no-such-session")
    async with client(server, "wrong-token") as intruder:
        with pytest.raises(AgentError):
            await intruder.list_sessions()
    after = await scrape(server, token)
    unary = {"grpc_type": "unary", "grpc_service": "omni.v1.AgentService"}
    assert moved(before, after, "grpc_server_handled_total", **unary, grpc_method="Abort",
                 grpc_code="NotFound") == 1  # fmt: skip
    assert moved(before, after, "grpc_server_handled_total", **unary, grpc_method="ListSessions",
                 grpc_code="Unauthenticated") == 1  # fmt: skip
    assert moved(before, after, "grpc_server_msg_received_total", **unary,
                 grpc_method="Abort") == 1  # fmt: skip


async def test_routes_are_templates_and_unknown_paths_are_one_series(start: Start) -> None:
    server = await start()
    junk = secrets.token_hex(8)
    before = await scrape(server)
    async with httpx.AsyncClient(base_url=http_url(server)) as http:
        assert (await http.get(f"/api/sessions/{junk}/stream")).status_code == 404
        assert (await http.get(f"/{junk}/probe")).status_code == 404
        created = await http.post("/api/sessions", json={})
        assert created.status_code == 201
        odd = await http.request(f"X{junk.upper()}", "/api/sessions")
        assert odd.status_code == 405
    text = (await httpx.AsyncClient().get(http_url(server) + "/metrics")).text
    after = parse(text)
    assert junk not in text and junk.upper() not in text
    assert moved(before, after, "omni_http_requests_total", route="/api/sessions/{sid}/stream",
                 method="GET", status="404") == 1  # fmt: skip
    assert moved(before, after, "omni_http_requests_total", route="unmatched", method="GET",
                 status="404") == 1  # fmt: skip
    assert moved(before, after, "omni_http_requests_total", route="/api/sessions",
                 method="POST", status="201") == 1  # fmt: skip
    # A made-up method is "other", not a new series.
    assert moved(before, after, "omni_http_requests_total", route="/api/sessions",
                 method="other", status="405") == 1  # fmt: skip


async def test_open_sse_streams_and_subscribers_per_session(start: Start) -> None:
    server = await start()
    url = http_url(server)
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        sid = (await http.post("/api/sessions", json={})).json()["session"]["sessionId"]
        route = "/api/sessions/{sid}/stream"
        async with (
            http.stream("GET", f"/api/sessions/{sid}/stream") as one,
            http.stream("GET", f"/api/sessions/{sid}/stream") as two,
        ):
            assert one.status_code == two.status_code == 200
            during = await scrape(server)
            assert value(during, "omni_http_sse_streams_open", route=route) == 2
            assert value(during, "omni_session_subscribers_bucket", le="1") == 0
            assert value(during, "omni_session_subscribers_bucket", le="2") == 1
            assert value(during, "omni_session_subscribers_gsum") == 2

        async def closed() -> Samples:
            while True:
                now = await scrape(server)
                if value(now, "omni_http_sse_streams_open", route=route) == 0:
                    return now
                await asyncio.sleep(0.02)

        after = await asyncio.wait_for(closed(), 10)
    assert value(after, "omni_session_subscribers_bucket", le="0") == 1


async def test_an_unauthenticated_scrape_is_refused_when_a_token_is_set(start: Start) -> None:
    token = secrets.token_hex(16)
    server = await start(token=token)
    async with httpx.AsyncClient(base_url=http_url(server)) as http:
        refused = await http.get("/metrics")
        assert refused.status_code == 401
        assert "grpc_server" not in refused.text
        wrong = await http.get("/metrics", headers={"authorization": "Bearer nope"})
        assert wrong.status_code == 401
    assert await scrape(server, token)


async def test_public_metrics_opens_only_the_metrics_route(start: Start) -> None:
    token = secrets.token_hex(16)
    server = await start(http=SseConfig(port=0, auth_token=token, public_metrics=True))
    async with httpx.AsyncClient(base_url=http_url(server)) as http:
        assert (await http.get("/metrics")).status_code == 200
        assert (await http.get("/api/sessions")).status_code == 401


async def test_no_metrics_means_no_route_and_no_series(start: Start) -> None:
    server = await start(metrics=False)
    async with httpx.AsyncClient(base_url=http_url(server)) as http:
        assert (await http.get("/metrics")).status_code == 404


async def test_replay_hits_misses_and_cutoffs_are_read_from_the_protocol() -> None:
    metrics = ServerMetrics(process=False)
    log = ObservedEventLog(MemoryEventLog(bodies.resync_required_body(), max_count=3), metrics)
    first = await log.publish(bodies.task_state_body("running"))
    hit = await log.subscribe(first.event_id, [bodies.task_state_body("running")])
    miss = await log.subscribe("ffffffff-1")
    slow = await log.subscribe()
    assert (await miss.next()) is not None
    assert (await hit.next()) is not None
    # Published without waiting for the readers (the counts are the subject
    # here, not back-pressure: tests/test_runtime_event_log.py), so the
    # cut-off comes at a fixed event: the fifth, whose backlog apart from
    # itself is past the 3-event window. A sixth follows it live.
    for _ in range(6):
        log.publish_nowait(bodies.task_state_body("running"))
    async with asyncio.timeout(30):
        slow_events = [await slow.next(), await slow.next()]

    def count(name: str, **labels: str) -> float:
        return metrics.registry.get_sample_value(name, labels) or 0.0

    assert count("omni_replays_total", result="miss") == 1
    assert count("omni_replays_total", result="hit") == 1
    # The slow subscriber's queue reached past the 3-event buffer: cut off, told to resync.
    assert slow_events[0] is not None and slow_events[0].server_event is not None
    assert slow_events[0].server_event.WhichOneof("kind") == "resync_required"
    # So was the resumed one, which read nothing since.
    assert count("omni_subscriber_cutoffs_total") == 1
    async with asyncio.timeout(30):
        assert (await hit.next()) is not None
    assert count("omni_subscriber_cutoffs_total") == 2
    assert count("omni_events_published_total") == 7


def test_a_failed_trace_append_is_counted(tmp_path: Path) -> None:
    metrics = ServerMetrics(process=False)
    observer = HubTelemetry(metrics, None, "demo")
    (tmp_path / "blocked").write_text("a file where the trace directory should be")
    writer = observer.trace_writer(tmp_path / "blocked" / "s_001.jsonl")
    with pytest.raises(OSError):
        writer.append_line(b'{"x":1}')
    ok = observer.trace_writer(tmp_path / "ok" / "s_001.jsonl")
    ok.append_line(b'{"x":1}')
    assert metrics.registry.get_sample_value("omni_trace_write_errors_total") == 1
    assert metrics.registry.get_sample_value("omni_trace_written_bytes_total") == 8


def test_no_http_serves_metrics_on_metrics_port_behind_the_token(
    serve_process: Callable[..., Any],
) -> None:
    token = secrets.token_hex(16)
    served = serve_process("--no-http", "--metrics-port", "0", "--auth-token", token)
    line = next(line for line in served.banner if "metrics on" in line)
    url = line.strip().rsplit(" ", 1)[-1]
    assert url.endswith("/metrics")
    assert httpx.get(url).status_code == 401
    auth = {"authorization": f"Bearer {token}"}
    # The HTTP app's Host rule holds here too (DNS rebinding).
    assert httpx.get(url, headers={**auth, "host": "rebound.example"}).status_code == 403
    response = httpx.get(url, headers=auth)
    assert response.status_code == 200
    names = {family.name for family in text_string_to_metric_families(response.text)}
    assert {"grpc_server_started", "omni_runs_started", "process_cpu_seconds"} <= names


async def test_the_reference_table_lists_every_metric_the_server_exposes(start: Start) -> None:
    server = await start()
    async with client(server) as agent:
        async for _ in agent.run("hi"):
            pass
    text = (await httpx.AsyncClient().get(http_url(server) + "/metrics")).text
    exposed = {
        family.name
        for family in text_string_to_metric_families(text)
        if not family.name.startswith(("process_", "python_"))
        and not family.name.endswith(("_gcount", "_gsum", "_created"))
    }
    doc = (Path(__file__).parent.parent / "docs" / "monitoring.md").read_text()
    documented = {
        name.removesuffix("_total")
        for name in re.findall(r"^\| `([a-z_]+)` \|", doc, flags=re.MULTILINE)
    }
    assert documented == exposed


async def test_a_cancelled_run_call_counts_as_client_gone_and_canceled(start: Start) -> None:
    server = await start(engine_options={"pacing": "0.05"})
    before = await scrape(server)
    async with client(server) as agent:
        stream = agent.run("take your time")
        async for event in stream:
            if event.kind == "partial_text":
                stream.cancel()
                break

    async def settled() -> Samples:
        while True:
            now = await scrape(server)
            done = moved(before, now, "omni_runs_finished_total", status="aborted")
            handled = moved(before, now, "grpc_server_handled_total", **RUN, grpc_code="Canceled")
            if done and handled:
                return now
            await asyncio.sleep(0.02)

    after = await asyncio.wait_for(settled(), 10)
    assert moved(before, after, "omni_aborts_total", kind="client_gone") == 1
    assert moved(before, after, "omni_runs_finished_total", status="aborted") == 1
    assert moved(before, after, "grpc_server_handled_total", **RUN, grpc_code="Canceled") == 1
    assert moved(before, after, "grpc_server_handled_total", **RUN, grpc_code="OK") == 0


async def test_engine_requests_and_retries_of_the_openai_engine(
    start: Start, caplog: pytest.LogCaptureFixture
) -> None:
    with FakeOpenAI() as fake:
        fake.script(error_reply(503, "busy"), text_reply("ok"))
        options = {"base_url": fake.base_url, "model": "m", "retry_base_ms": "1"}
        server = await start(engine="openai", engine_options=options)
        before = await scrape(server)
        with caplog.at_level(logging.WARNING, logger="omni_grpc.observability.observer"):
            async with client(server) as agent:
                async for _ in agent.run("hi"):
                    pass
        after = await scrape(server)
    # The retry is in the log as the CLI shows it, with the engine's attempt limit.
    [retry] = [r.getMessage() for r in caplog.records if "retrying in" in r.getMessage()]
    assert retry.startswith("engine openai: request failed (")
    assert retry.endswith("; retrying in 0.001 s, attempt 2/5"), retry
    openai = {"engine": "openai"}
    assert moved(before, after, "omni_engine_request_retries_total", **openai,
                 reason="failed") == 1  # fmt: skip
    assert moved(before, after, "omni_engine_request_duration_seconds_count", **openai,
                 outcome="failed") == 1  # fmt: skip
    assert moved(before, after, "omni_engine_request_duration_seconds_count", **openai,
                 outcome="completed") == 1  # fmt: skip
    assert moved(before, after, "omni_runs_finished_total", status="completed") == 1


async def test_build_info_and_series_that_exist_before_their_first_event(start: Start) -> None:
    """rate() over a series that appears with its first increment misses that
    increment: every abort kind and approval decision is there from the start."""
    from omni_grpc import __version__
    from omni_grpc.vocabulary import AbortKind, Decision

    server = await start()
    samples = await scrape(server)
    info = [labels for (name, labels), v in samples.items() if name == "omni_build_info"]
    assert len(info) == 1 and samples[("omni_build_info", info[0])] == 1
    labels = dict(info[0])
    assert labels["version"] == __version__
    assert labels["native_codec"] in ("yes", "no")
    for kind in AbortKind:
        assert ("omni_aborts_total", frozenset({("kind", str(kind))})) in samples, kind
    # The decisions, and the ends of a wait nobody answered (the reference's
    # stop reasons of the call's output).
    for decision in [*Decision, "aborted", "timeout"]:
        key = ("omni_approval_wait_seconds_count", frozenset({("decision", str(decision))}))
        assert samples.get(key) == 0, decision
