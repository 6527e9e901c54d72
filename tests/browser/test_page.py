"""The built-in page in real headless Chromium, live over EventSource."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest

from omni_grpc.engines.demo import DemoEngine
from omni_grpc.runtime.hub import Hub
from omni_grpc.transport.sse.app import create_app
from omni_grpc.transport.sse.server import HttpServer
from tests.browser.webdriver import Browser, chromium

pytestmark = pytest.mark.browser


@asynccontextmanager
async def page_server(tmp_path: Path) -> AsyncIterator[tuple[Hub, str]]:
    hub = Hub(DemoEngine(pacing=0.03), tmp_path)
    server = HttpServer(create_app(hub, token="browser-token"), port=0)
    await server.start()
    try:
        yield hub, server.url
    finally:
        await hub.shutdown()
        await server.stop()


async def test_the_page_streams_a_run_and_asks_for_approval(tmp_path: Path) -> None:
    async with page_server(tmp_path) as (hub, url), chromium() as browser:
        await browser.get(f"{url}/?access_token=browser-token")
        await browser.js("document.getElementById('mode').value = 'ask'")
        await browser.type("#prompt", "What is in my workspace?")
        await browser.click("#send")

        # Text streams in before the run finishes: a partial assistant bubble.
        await browser.wait_for(
            "return document.querySelector('.assistant.streaming') !== null"
            " || document.querySelector('.tool') !== null"
        )
        # The ask: approve and deny buttons on the tool card.
        await browser.wait_for("return document.querySelector('.tool button.approve') !== null")
        assert (
            await browser.js("return document.querySelector('.tool button.deny').textContent")
            == "Deny"
        )
        assert await browser.js("return document.body.dataset.state") == "running"
        await browser.click(".tool button.approve")
        await browser.wait_for(
            "return document.body.dataset.state === 'idle'"
            " && document.querySelectorAll('.assistant').length === 2"
        )

        view = await browser.js(
            """
            const text = (sel) => [...document.querySelectorAll(sel)].map((e) => e.textContent);
            return {
              user: text('.user'), thinking: text('.thinking .body'), assistant: text('.assistant'),
              tool: text('.tool .name'), args: text('.tool .args'), output: text('.tool .output'),
              decision: text('.tool .decision'), streaming: text('.streaming'),
              asks: text('.tool .ask'), session: document.body.dataset.session,
            };
            """
        )
        assert view["user"] == ["What is in my workspace?"]
        assert view["thinking"][0].startswith("The user wrote 'What is in my workspace?'")
        assert view["assistant"][0] == "I'll list the session workspace first."
        assert view["assistant"][1].startswith("You said 'What is in my workspace?'.")
        assert view["tool"] == ["list_workspace"] and view["args"] == ['{ "path": "." }']
        assert view["output"] == ["(the workspace is empty)"]
        assert view["decision"] == ["allowed by you"] and view["asks"] == []
        assert view["streaming"] == []
        # What the page shows is what the session recorded.
        recorded = [
            m.text.text
            async for m in await hub.history(view["session"])
            if m.WhichOneof("payload") == "text"
        ]
        assert recorded == [view["user"][0], *view["assistant"]]

        png = await browser.screenshot()
        assert png.startswith(b"\x89PNG")
        (tmp_path / "page.png").write_bytes(png)  # docs/ screenshots: test_layout.py


# Holds the page's approval POST (its request or its answer) until the stream has
# shown a decision: the two orders a real network can produce, made certain.
HOLD_APPROVALS = """
const send = window.fetch;
const shown = () => new Promise((done) => {
  const look = () => (document.querySelector('.tool .decision') ? done() : setTimeout(look, 10));
  look();
});
window.fetch = async (url, init) => {
  const approval = String(url).includes('/approvals/');
  if (approval && %(request)s) await shown();
  const answer = await send(url, init);
  if (approval && !%(request)s) await shown();
  return answer;
};
"""


async def _ask(browser: Browser, url: str) -> None:
    await browser.get(f"{url}/?access_token=browser-token")
    await browser.js("document.getElementById('mode').value = 'ask'")
    await browser.type("#prompt", "What is in my workspace?")
    await browser.click("#send")
    await browser.wait_for("return document.querySelector('.tool button.approve') !== null")


DECISION = "const d = document.querySelector('.tool .decision'); return d && d.textContent"


async def test_your_approval_is_yours_when_the_stream_outruns_its_answer(tmp_path: Path) -> None:
    async with page_server(tmp_path) as (_, url), chromium() as browser:
        await _ask(browser, url)
        await browser.js(HOLD_APPROVALS % {"request": "false"})
        await browser.click(".tool button.approve")
        await browser.wait_for(
            "return document.body.dataset.state === 'idle'"
            " && document.querySelectorAll('.assistant').length === 2"
        )
        assert await browser.js(DECISION) == "allowed by you"


async def test_a_decision_taken_elsewhere_first_is_not_labelled_yours(tmp_path: Path) -> None:
    async with page_server(tmp_path) as (_, url), chromium() as browser:
        await _ask(browser, url)
        session = await browser.js("return document.body.dataset.session")
        call = await browser.js("return document.querySelector('.tool').dataset.callId")
        await browser.js(HOLD_APPROVALS % {"request": "true"})
        await browser.click(".tool button.approve")  # held until the other decision shows
        headers = {"Authorization": "Bearer browser-token"}
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as http:
            r = await http.post(
                f"/api/sessions/{session}/approvals/{call}", json={"decision": "deny"}
            )
            assert r.status_code == 204, r.text
        # The page's own approve is refused as too late; the label names the run's mode.
        label = await browser.wait_for(
            "const d = document.querySelector('.tool .decision');"
            " return d && !document.querySelector('.tool .ask')"
            " && document.body.dataset.state === 'idle'"
            " && !d.textContent.endsWith('by you') && d.textContent"
        )
        assert label == "denied (ask me)"
        assert (
            await browser.js("return document.querySelector('.tool .state').textContent")
            == "not run"
        )


async def test_a_reload_rebuilds_the_session_from_history(tmp_path: Path) -> None:
    async with page_server(tmp_path) as (_, url), chromium() as browser:
        await browser.get(f"{url}/?access_token=browser-token")
        await browser.type("#prompt", "remember me")
        await browser.click("#send")
        await browser.wait_for(
            "return document.body.dataset.state === 'idle'"
            " && document.querySelectorAll('.assistant').length === 2"
        )
        before = await browser.js("return document.getElementById('log').innerText")
        # The URL now names the session; a reload shows the same conversation.
        await browser.js("location.reload()")
        await browser.wait_for("return document.querySelectorAll('.assistant').length === 2")
        after = await browser.js("return document.getElementById('log').innerText")
        assert after == before


async def test_the_page_reports_a_wrong_token(tmp_path: Path) -> None:
    async with page_server(tmp_path) as (_, url), chromium() as browser:
        await browser.get(f"{url}/?access_token=wrong")
        message = await browser.wait_for(
            "const t = document.getElementById('token');"
            " return !t.hidden && document.getElementById('token-why').textContent"
        )
        assert "refused this access token" in message and "bearer token" in message
        assert await browser.js("return document.getElementById('send').disabled") is True


async def test_without_a_session_the_page_lists_them_newest_first(tmp_path: Path) -> None:
    async with page_server(tmp_path) as (_, url), chromium() as browser:
        headers = {"Authorization": "Bearer browser-token"}
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as http:
            ids = []
            for prompt in ("first", "second"):
                r = await http.post("/v1/runs", json={"prompt": prompt})
                assert r.status_code == 200, r.text
                ids.append(r.headers["omni-session-id"])
            # The newest waits for an approval: running, in ask mode.
            r = await http.post("/api/sessions", json={})
            asking = r.json()["session"]["sessionId"]
            r = await http.post(f"/api/sessions/{asking}/tasks",
                                json={"input": [{"type": "text", "text": "third"}],
                                      "approvalMode": "ask"})  # fmt: skip
            assert r.status_code == 202, r.text
            while not (await http.get(f"/api/sessions/{asking}")).json()["session"][
                "pendingApprovalCount"
            ]:
                await asyncio.sleep(0.02)  # until the run reaches its tool call
        await browser.get(f"{url}/?access_token=browser-token")
        rows = await browser.wait_for(
            """
            const rows = [...document.querySelectorAll('.session-link')];
            return rows.length === 3 && rows.map((r) => [r.dataset.sessionId,
              r.querySelector('.state').textContent]);
            """
        )
        assert rows == [[asking, "needs approval"], [ids[1], "idle"], [ids[0], "idle"]]
        # Opening one shows its conversation, and the selector its mode.
        await browser.click(f".session-link[data-session-id='{ids[0]}']")
        await browser.wait_for("return document.querySelectorAll('.assistant').length === 2")
        assert await browser.js("return document.body.dataset.session") == ids[0]
        search = await browser.js("return location.search")
        assert search.count("access_token=browser-token") == 1
        assert "first" in await browser.js("return document.querySelector('.user').textContent")
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as http:
            mode = (await http.get(f"/api/sessions/{ids[0]}")).json()["session"]["approvalMode"]
        assert await browser.js("return document.getElementById('mode').value") == mode
