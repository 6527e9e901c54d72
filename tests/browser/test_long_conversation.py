"""A conversation far taller than the window, in real headless Chromium."""

from __future__ import annotations

from pathlib import Path

import pytest

from omni_grpc.engines.demo import DemoEngine
from tests.browser.scripted import ScriptedEngine
from tests.browser.serving import TOKEN, page_server, run_turns
from tests.browser.webdriver import ENTER, chromium

pytestmark = pytest.mark.browser

# Every conversation element whose box must hold its content: a flex column
# that shrinks its children squeezes exactly these (the turns, and what each holds).
CARD_HEIGHTS = """
const cards = [...document.querySelectorAll('#log > *, #log > .turn > *')];
return cards.map((e) => ({cls: e.className, height: e.getBoundingClientRect().height,
                          content: e.scrollHeight}));
"""


async def test_fifty_turns_keep_every_card_and_the_last_approval_usable(tmp_path: Path) -> None:
    async with page_server(tmp_path, DemoEngine()) as (_, url), chromium() as browser:
        session = await run_turns(url, [f"turn {n}" for n in range(1, 50)])
        await browser.get(f"{url}/?access_token={TOKEN}&session={session}")
        await browser.wait_for("return document.querySelectorAll('.user').length > 0")
        await browser.js("document.getElementById('mode').value = 'ask'")
        await browser.type("#prompt", "turn 50")
        await browser.click("#send")
        await browser.wait_for("return document.querySelector('.tool button.approve') !== null")

        cards = await browser.js(CARD_HEIGHTS)
        tools = [c for c in cards if "tool" in c["cls"].split()]
        assert len(tools) >= 2
        squeezed = [c for c in cards if c["height"] + 1 < c["content"] or c["height"] < 16]
        assert squeezed == [], squeezed[:5]
        # Every tool card has the same head, so the same height at least.
        assert min(t["height"] for t in tools) >= 30

        # The approval is on screen (the view followed the stream) and takes a real click.
        button = await browser.js(
            """
            const b = document.querySelector('.tool button.approve');
            const r = b.getBoundingClientRect();
            const hit = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
            const log = document.getElementById('log').getBoundingClientRect();
            return {height: r.height, width: r.width, top: r.top, bottom: r.bottom,
                    logTop: log.top, logBottom: log.bottom, hit: hit === b};
            """
        )
        assert button["height"] >= 24 and button["width"] >= 48, button
        assert button["logTop"] <= button["top"] and button["bottom"] <= button["logBottom"], button
        assert button["hit"], button
        await browser.click(".tool button.approve")
        await browser.wait_for(
            "return document.body.dataset.state === 'idle'"
            " && document.querySelector('.tool .decision.allow') !== null"
            " && document.querySelector('.tool button.approve') === null"
        )
        last = await browser.js("return [...document.querySelectorAll('.user')].pop().textContent")
        assert last == "turn 50"

        # A reload lands at the end, on the newest turns; earlier ones load on demand.
        await browser.js("location.reload()")
        await browser.wait_for("return document.querySelector('button.earlier') !== null")
        await browser.wait_for(
            "const l = document.getElementById('log');"
            " return l.scrollHeight - l.scrollTop - l.clientHeight < 2"
        )
        users = "return [...document.querySelectorAll('.user')].map((e) => e.textContent)"
        assert await browser.js(users) == [f"turn {n}" for n in range(31, 51)]
        assert await browser.js("return document.querySelector('button.earlier').textContent") == (
            "Show 30 earlier turns"
        )
        for count, label in ((40, "Show 10 earlier turns"), (50, None)):
            # Older turns go above what the reader is looking at, which stays put.
            anchor = await browser.js(
                """
                const log = document.getElementById('log');
                log.scrollTop = 0;
                const first = document.querySelector('.user');
                first.dataset.anchor = '1';
                return first.getBoundingClientRect().top;
                """
            )
            await browser.click("button.earlier")
            await browser.wait_for(f"return document.querySelectorAll('.user').length === {count}")
            moved = await browser.js(
                "return document.querySelector('[data-anchor]').getBoundingClientRect().top"
            )
            assert moved == pytest.approx(anchor, abs=2)
            earlier = await browser.js(
                "const b = document.querySelector('button.earlier'); return b && b.textContent"
            )
            assert earlier == label
        assert await browser.js(users) == [f"turn {n}" for n in range(1, 51)]
        cards = await browser.js(CARD_HEIGHTS)
        assert len([c for c in cards if "tool" in c["cls"].split()]) == 50
        assert [c for c in cards if c["height"] + 1 < c["content"] or c["height"] < 16] == []


async def test_the_view_follows_the_stream_until_the_reader_scrolls_up(tmp_path: Path) -> None:
    async with page_server(tmp_path, ScriptedEngine()) as (_, url), chromium() as browser:
        filler = "say: " + "A paragraph that takes room. " * 40
        session = await run_turns(url, [filler] * 6)
        await browser.get(f"{url}/?access_token={TOKEN}&session={session}")
        await browser.wait_for("return document.querySelectorAll('.assistant').length === 6")
        at_end = (
            "const l = document.getElementById('log');"
            " return l.scrollHeight - l.scrollTop - l.clientHeight < 2"
        )
        await browser.type("#prompt", "slow" + ENTER)
        await browser.wait_for(
            "const a = document.querySelector('.assistant.streaming');"
            " return a && a.innerText.includes('word10 ')"
        )
        assert await browser.js(at_end)  # following the words as they come
        # The reader scrolls up: the stream goes on without pulling them down.
        top = await browser.js(
            "const l = document.getElementById('log'); l.scrollTop = 200; return l.scrollTop"
        )
        await browser.wait_for(
            "return document.querySelector('.assistant.streaming').innerText.includes('word40 ')"
        )
        assert await browser.js("return document.getElementById('log').scrollTop") == top
        assert await browser.js("return document.getElementById('latest').hidden") is False
        # "Latest" brings them back, and the view follows again.
        await browser.click("#latest")
        await browser.wait_for(
            "return document.querySelector('.assistant.streaming').innerText.includes('word70 ')"
        )
        assert await browser.js(at_end)
        assert await browser.js("return document.getElementById('latest').hidden") is True
