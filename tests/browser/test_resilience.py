"""A reload in the middle of a run, and a server that restarts under the page."""

from __future__ import annotations

from pathlib import Path

import pytest

from omni_grpc.engines.demo import DemoEngine
from tests.browser.scripted import ScriptedEngine
from tests.browser.serving import TOKEN, page_server
from tests.browser.webdriver import ENTER, chromium

pytestmark = pytest.mark.browser

TEXTS = "return [...document.querySelectorAll('.user, .assistant')].map((e) => e.innerText)"


async def recorded_texts(hub, session: str) -> list[str]:  # type: ignore[no-untyped-def]
    return [
        m.text.text.strip()  # innerText drops a trailing space
        async for m in await hub.history(session)
        if m.WhichOneof("payload") == "text" and m.text.text
    ]


async def test_a_reload_while_an_approval_waits_keeps_it_answerable(tmp_path: Path) -> None:
    async with page_server(tmp_path) as (hub, url), chromium() as browser:
        await browser.get(f"{url}/?access_token={TOKEN}&new=1")
        await browser.js("document.getElementById('mode').value = 'ask'")
        await browser.type("#prompt", "reload me" + ENTER)
        await browser.wait_for("return document.querySelector('.tool button.approve') !== null")
        await browser.js("location.reload()")
        await browser.wait_for("return document.querySelector('.tool button.approve') !== null")
        assert await browser.js("return document.getElementById('status').textContent") == (
            "Approval needed"
        )
        assert await browser.js(TEXTS) == ["reload me", "I'll list the session workspace first."]
        # The session runs in "ask me": so says the selector after a reload.
        assert await browser.js("return document.getElementById('mode').value") == "ask"
        await browser.click(".tool button.approve")
        await browser.wait_for(
            "return document.body.dataset.state === 'idle'"
            " && document.querySelectorAll('.assistant').length === 2"
        )
        session = await browser.js("return document.body.dataset.session")
        assert await browser.js(TEXTS) == await recorded_texts(hub, session)
        decision = "return document.querySelector('.tool .decision').textContent"
        assert await browser.js(decision) == "allowed by you"
        await browser.js("location.reload()")  # the tab remembers who decided
        await browser.wait_for("return document.querySelectorAll('.assistant').length === 2")
        assert await browser.js(decision) == "allowed by you"


async def test_a_reload_mid_stream_neither_drops_nor_doubles_a_word(tmp_path: Path) -> None:
    async with page_server(tmp_path, ScriptedEngine()) as (hub, url), chromium() as browser:
        await browser.get(f"{url}/?access_token={TOKEN}&new=1")
        await browser.type("#prompt", "slow" + ENTER)
        await browser.wait_for(
            "const a = document.querySelector('.assistant.streaming');"
            " return a && a.innerText.includes('word20 ')"
        )
        await browser.js("location.reload()")
        # Back mid-run: the live tail paints what streamed so far, the stream goes on from it.
        await browser.wait_for("return document.querySelector('.assistant.streaming') !== null")
        await browser.wait_for(
            "return document.body.dataset.state === 'idle'"
            " && document.querySelector('.streaming') === null",
            timeout=60,
        )
        session = await browser.js("return document.body.dataset.session")
        texts = await browser.js(TEXTS)
        assert texts == await recorded_texts(hub, session)
        assert texts[1] == " ".join(f"word{n}" for n in range(120))


async def test_the_page_rides_out_a_server_restart(tmp_path: Path) -> None:
    async with chromium() as browser:
        async with page_server(tmp_path, DemoEngine()) as (_, url):
            port = int(url.rsplit(":", 1)[1])
            await browser.get(f"{url}/?access_token={TOKEN}&new=1")
            await browser.type("#prompt", "before the restart" + ENTER)
            await browser.wait_for(
                "return document.body.dataset.state === 'idle'"
                " && document.querySelectorAll('.assistant').length === 2"
            )
            before = await browser.js(TEXTS)
        # Down: the page says so instead of going quiet, and Send is off.
        await browser.wait_for("return document.body.dataset.state === 'offline'")
        banner = await browser.js("return document.getElementById('banner').textContent")
        assert banner.startswith("Cannot reach the server"), banner
        assert await browser.js("return document.getElementById('send').disabled") is True
        # A prompt typed meanwhile is not sent, and kept for when it is back.
        await browser.type("#prompt", "while it is down" + ENTER)
        assert await browser.js("return document.getElementById('prompt').value") == (
            "while it is down"
        )
        await browser.js("document.getElementById('prompt').value = ''")
        # Up again on the same port and data: the page reconnects by itself.
        async with page_server(tmp_path, DemoEngine(), port=port) as (hub, _):
            await browser.wait_for(
                "return document.body.dataset.state === 'idle'"
                " && document.getElementById('banner').hidden",
                timeout=30,
            )
            assert await browser.js(TEXTS) == before
            await browser.type("#prompt", "after the restart" + ENTER)
            await browser.wait_for(
                "return document.body.dataset.state === 'idle'"
                " && document.querySelectorAll('.assistant').length === 4"
            )
            session = await browser.js("return document.body.dataset.session")
            assert await browser.js(TEXTS) == await recorded_texts(hub, session)
