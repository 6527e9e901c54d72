"""The browser example (examples/browser: the generated TypeScript stubs with
@connectrpc/connect-web) in headless Chromium, over Connect (proto and JSON)
and gRPC-Web, against the real server on another origin (its --cors-origin).

One session, two runs, as a person would use the page: a run that asks for
approval, loses its connection while the approval waits, re-attaches after
the last event id, is approved and streams to task_state idle; then a run
aborted while it waits. The page's DOM and what it received (each message's
include_json bytes) are checked against the server's trace, byte for byte.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from urllib.parse import urlencode

import httpx
import pytest
from connect_serving import serving
from polyglot.polyglot_builds import build_browser
from prometheus_client.parser import text_string_to_metric_families
from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.staticfiles import StaticFiles

from omni_grpc.client import AgentClient
from omni_grpc.transport.sse.server import HttpServer
from omni_grpc_proto.omni.v1 import agent_service_pb2, omni_pb2
from tests.browser.dropping_link import DroppingLink
from tests.browser.webdriver import Browser, chromium

pytestmark = [
    pytest.mark.browser,
    pytest.mark.parametrize("protocol", ["connect", "connect-json", "grpc-web"]),
]

TOKEN = "connect-web-token"
PROMPT = "list the workspace"  # the demo engine calls list_workspace, then answers
# Bounds a hang only: every wait ends on a DOM condition, far sooner when all is well.
WAIT = 60.0

APPROVAL_CARD = "return document.querySelector('.approval button.approve') !== null"
EVENTS = "return [...document.querySelectorAll('#events li')].map((li) => li.textContent)"
RECEIVED = "return JSON.stringify(window.omniReceived)"
DROPPED = re.compile(r"/omni\.v1\.AgentService/(Run|Attach) - Failed to load resource: net::ERR_")


@asynccontextmanager
async def static_site(directory: Path) -> AsyncIterator[str]:
    """Serves the built page from an origin of its own; its URL."""
    app = Starlette(routes=[Mount("/", StaticFiles(directory=directory, html=True))])
    server = HttpServer(app, port=0)
    await server.start()
    try:
        yield server.url
    finally:
        await server.stop()


async def scrape(base_url: str) -> dict[tuple[str, ...], float]:
    """The server's /metrics samples by (name, *label values in label-name order)."""
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}) as http:
        r = await http.get(f"{base_url}/metrics")
    assert r.status_code == 200, r.text
    return {
        (s.name, *(s.labels[k] for k in sorted(s.labels))): s.value
        for family in text_string_to_metric_families(r.text)
        for s in family.samples
    }


async def send(browser: Browser, prompt: str) -> None:
    await browser.js("document.getElementById('prompt').value = ''")
    await browser.type("#prompt", prompt)
    await browser.click("#send")


async def test_the_browser_example_streams_approves_resumes_and_aborts(
    tmp_path: Path, protocol: str
) -> None:
    page = build_browser()
    async with (
        static_site(page) as site,
        serving(tmp_path / "data", token=TOKEN, cors_origins=[site]) as served,
        DroppingLink(int(served.base_url.rsplit(":", 1)[1])) as link,
        chromium() as browser,
    ):
        query = urlencode({"server": link.url, "protocol": protocol, "token": TOKEN})
        await browser.get(f"{site}/index.html?{query}")
        assert await browser.js("return document.getElementById('protocol').textContent") == (
            protocol
        )

        # Run 1: asks before its tool; the connection drops while the approval waits.
        await send(browser, PROMPT)
        await browser.wait_for(APPROVAL_CARD, WAIT)
        session = await browser.js("return document.body.dataset.session")
        last_event = await browser.js("return document.body.dataset.lastEvent")
        assert link.drop() >= 1  # at least the Run stream was open
        await browser.wait_for("return Number(document.body.dataset.reconnects) >= 1", WAIT)
        await browser.click(".approval button.approve")
        await browser.wait_for(
            "return document.body.dataset.state === 'idle'"
            " && document.body.dataset.error === undefined"
            " && document.getElementById('reply').dataset.done === 'true'"
            # Run is enabled again once the page has finished following the run.
            " && !document.getElementById('send').disabled",
            WAIT,
        )
        events = await browser.js(EVENTS)
        # It re-attached after the last event it had, not from the start.
        assert f"reconnecting (attempt 1) after event {last_event}" in events
        reply = await browser.js("return document.getElementById('reply').textContent")

        async with AgentClient(served.grpc_target, token=TOKEN) as agent:
            history = [m async for m in agent.history(session)]
        answers = [
            m.text.text
            for m in history
            if m.WhichOneof("payload") == "text" and m.text.role == omni_pb2.ROLE_ASSISTANT
        ]
        assert answers and reply == answers[-1]
        decisions = [m.approval_decision for m in history if m.HasField("approval_decision")]
        assert [d.decision for d in decisions] == [omni_pb2.DECISION_ALLOW]
        assert f"decision: ALLOW {decisions[0].tool_call_id}" in events
        assert any(m.HasField("tool_call_output") for m in history)
        assert not await browser.js("return document.querySelectorAll('.approval').length")

        # Run 2, same session: aborted from the page while its approval waits.
        await send(browser, PROMPT)
        await browser.wait_for(APPROVAL_CARD, WAIT)
        await browser.click("#abort")
        await browser.wait_for(
            "return document.body.dataset.state === 'idle'"
            " && document.body.dataset.aborted === 'true'"
            " && !document.getElementById('send').disabled",
            WAIT,
        )
        events = await browser.js(EVENTS)
        assert "abort requested, was running: true" in events
        assert "aborted: stopped in the browser" in events
        assert await browser.js("return document.body.dataset.error") is None

        async with AgentClient(served.grpc_target, token=TOKEN) as agent:
            history = [m async for m in agent.history(session)]
            lines = [line async for line in agent.history_lines(session)]
            info = next(s for s in await agent.list_sessions() if s.session_id == session)
        assert history[-1].abort.reason == "stopped in the browser"
        assert info.state == agent_service_pb2.SESSION_STATE_IDLE
        assert info.message_count == len(lines)

        # Lossless: every message the page received, across the drop and both
        # runs, is the trace's line byte for byte, each once, in order (the
        # trace's session_meta is not an event; partial_* are not recorded).
        received = json.loads(await browser.js(RECEIVED))
        assert [r["json"].encode() for r in received] == [
            line for line in lines if b'"type":"session_meta"' not in line
        ]
        assert len({r["eventId"] for r in received}) == len(received)

        # The server's side of it: cross-origin calls (CORS preflights answered),
        # and the re-attach resumed after an event id from its replay buffer.
        metrics = await scrape(served.base_url)
        assert metrics[("omni_http_requests_total", "OPTIONS", "/omni.v1.AgentService/Run", "200")]
        assert metrics[("omni_replays_total", "hit")] >= 1
        assert metrics[("omni_replays_total", "miss")] == 0
        # No CORS refusal or script error: the console's only errors are the
        # dropped stream's own (net::ERR_INCOMPLETE_CHUNKED_ENCODING and kin).
        errors = [e["message"] for e in await browser.console() if e["level"] == "SEVERE"]
        assert all(DROPPED.search(message) for message in errors), errors
