"""The session list, deep links, "new session" and the way back, in real Chromium."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from omni_grpc.engines.demo import DemoEngine
from tests.browser.serving import AUTH, TOKEN, page_server, run_turns
from tests.browser.webdriver import chromium

pytestmark = pytest.mark.browser

ROWS = """
const rows = [...document.querySelectorAll('.session-link')];
return document.body.dataset.titles === 'loaded' && rows.map((r) => ({
  id: r.dataset.sessionId, title: r.querySelector('.title').textContent,
  state: r.querySelector('.state').textContent, count: r.querySelector('.count').textContent,
  when: r.querySelector('time').textContent, href: r.getAttribute('href')}));
"""


async def test_the_list_names_sessions_by_their_first_prompt(tmp_path: Path) -> None:
    async with page_server(tmp_path, DemoEngine()) as (_, url), chromium() as browser:
        older = await run_turns(url, ["How do I rotate the logs?", "and compress them"])
        newer = await run_turns(url, ["Summarise   the\nREADME " + "very " * 40 + "long"])
        async with httpx.AsyncClient(base_url=url, headers=AUTH) as http:
            infos = {
                s["sessionId"]: s for s in (await http.get("/api/sessions")).json()["sessions"]
            }
        await browser.get(f"{url}/?access_token={TOKEN}")
        rows = await browser.wait_for(ROWS)
        assert [r["id"] for r in rows] == [newer, older]  # most recently active first
        assert rows[1]["title"] == "How do I rotate the logs?"
        # A long first prompt is one clipped line.
        assert rows[0]["title"].startswith("Summarise the README very very")
        assert rows[0]["title"].endswith("…") and len(rows[0]["title"]) <= 90
        for row in rows:
            assert row["state"] == "idle" and row["when"] == "just now"
            assert row["count"] == f"{infos[row['id']]['messageCount']} messages"
            assert row["href"] == f"?access_token={TOKEN}&session={row['id']}"
        # The list stays current: a session that starts elsewhere shows up by itself.
        async with httpx.AsyncClient(base_url=url, headers=AUTH) as http:
            r = await http.post("/api/sessions", json={})
            asking = r.json()["session"]["sessionId"]
            body = {"input": [{"type": "text", "text": "Asks first"}], "approvalMode": "ask"}
            r = await http.post(f"/api/sessions/{asking}/tasks", json=body)
            assert r.status_code == 202, r.text
        await browser.wait_for(
            "const r = document.querySelector('.session-link');"
            f" return r.dataset.sessionId === '{asking}'"
            " && r.querySelector('.state').textContent === 'needs approval'"
            " && r.querySelector('.title').textContent === 'Asks first'",
            timeout=20,
        )
        async with httpx.AsyncClient(base_url=url, headers=AUTH) as http:
            await http.post(f"/api/sessions/{asking}/abort", json={})
        # No run state in the header of the list: there is no run to speak of.
        assert await browser.js("return document.getElementById('status').hidden") is True
        assert await browser.js("return document.getElementById('back').hidden") is True

        # A row opens the conversation, titled by its first prompt, with a way back.
        await browser.click(f".session-link[data-session-id='{older}']")
        await browser.wait_for(
            "return document.getElementById('title').textContent === 'How do I rotate the logs?'"
        )
        texts = await browser.js(
            "return [...document.querySelectorAll('.user')].map((e) => e.textContent)"
        )
        assert texts == ["How do I rotate the logs?", "and compress them"]
        assert await browser.js("return document.getElementById('status').textContent") == "Ready"
        await browser.click("#back")
        await browser.wait_for("return document.querySelectorAll('.session-link').length === 3")

        # "New session" is an empty conversation; the first prompt creates it.
        await browser.click("#new")
        await browser.wait_for("return document.body.dataset.view === 'session'")
        assert await browser.js("return document.querySelectorAll('.msg').length") == 0
        await browser.type("#prompt", "a fresh start")
        await browser.click("#send")
        await browser.wait_for(
            "return document.body.dataset.state === 'idle'"
            " && document.querySelectorAll('.assistant').length === 2"
        )
        created = await browser.js("return document.body.dataset.session")
        assert created not in (older, newer)
        assert await browser.js("return location.search") == (
            f"?access_token={TOKEN}&session={created}"
        )
        assert await browser.js("return document.getElementById('title').textContent") == (
            "a fresh start"
        )
        # The deep link is the conversation.
        await browser.get(f"{url}/?access_token={TOKEN}&session={created}")
        await browser.wait_for("return document.querySelectorAll('.assistant').length === 2")


async def test_an_unknown_session_says_so(tmp_path: Path) -> None:
    async with page_server(tmp_path) as (_, url), chromium() as browser:
        await browser.get(f"{url}/?access_token={TOKEN}&session=session-that-never-was")
        message = await browser.wait_for(
            "const b = document.getElementById('banner'); return !b.hidden && b.textContent"
        )
        assert "This session does not exist on this server." in message
        links = await browser.js(
            "return [...document.querySelectorAll('#banner a')].map((a) => a.getAttribute('href'))"
        )
        assert links == [f"?access_token={TOKEN}", f"?access_token={TOKEN}&new=1"]
        assert "offline" not in (await browser.js("return document.body.innerText")).lower()
