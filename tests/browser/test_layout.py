"""The page on a desktop and on a 390 px phone screen; the screenshots in docs/."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.browser.scripted import ScriptedEngine
from tests.browser.serving import TOKEN, page_server
from tests.browser.webdriver import ENTER, Browser, chromium

pytestmark = pytest.mark.browser

DOCS = Path(__file__).parents[2] / "docs"

# Everything that sticks out of the viewport sideways (a phone would scroll or clip it).
OVERFLOW = """
const w = document.documentElement.clientWidth;
const wide = [...document.querySelectorAll('header, header *, main, main *, form, form *')]
  .filter((e) => e.getClientRects().length && e.getBoundingClientRect().right > w + 0.5
          && !e.closest('.code pre, .table'))
  .map((e) => e.tagName + '.' + e.className);
return {page: document.documentElement.scrollWidth, width: w, wide: wide.slice(0, 5)};
"""

APPROVE_IN_VIEW = """
const b = document.querySelector('.tool button.approve');
const r = b.getBoundingClientRect();
const log = document.getElementById('log').getBoundingClientRect();
const hit = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
return r.height >= 30 && r.width >= 60 && r.top >= log.top && r.bottom <= log.bottom
  && r.right <= document.documentElement.clientWidth && hit === b;
"""


async def save(browser: Browser, name: str, tmp_path: Path) -> None:
    png = await browser.screenshot()
    assert png.startswith(b"\x89PNG")
    (tmp_path / name).write_bytes(png)
    if os.environ.get("OMNI_UPDATE_SCREENSHOT") == "1":
        (DOCS / name).write_bytes(png)


async def test_a_conversation_on_a_desktop_and_on_a_390_px_phone(tmp_path: Path) -> None:
    async with page_server(tmp_path, ScriptedEngine()) as (_, url), chromium() as browser:
        await browser.get(f"{url}/?access_token={TOKEN}&new=1")
        await browser.type("#prompt", "How do I rotate the app's logs?" + ENTER)
        await browser.wait_for(
            "return document.body.dataset.state === 'idle' && document.querySelector('.code')"
        )
        await browser.js("document.getElementById('mode').value = 'ask'")
        await browser.type("#prompt", "What is in notes/big.txt?" + ENTER)
        await browser.wait_for("return document.querySelector('.tool button.approve') !== null")
        await browser.wait_for(APPROVE_IN_VIEW)
        await save(browser, "screenshot.png", tmp_path)
        # Every control has a name a screen reader can say.
        unnamed = await browser.js(
            """
            return [...document.querySelectorAll('button, a, textarea, select')]
              .filter((e) => e.getClientRects().length)
              .filter((e) => !(e.getAttribute('aria-label') || e.textContent.trim()
                               || (e.labels && e.labels.length)))
              .map((e) => e.outerHTML.slice(0, 80));
            """
        )
        assert unnamed == []

        await browser.set_size(390, 844)
        await browser.wait_for("return document.documentElement.clientWidth <= 390")
        layout = await browser.js(OVERFLOW)
        assert layout["page"] <= layout["width"] and layout["wide"] == [], layout
        # Still answerable at phone width: the view follows, the buttons are whole.
        await browser.wait_for(APPROVE_IN_VIEW)
        composer = await browser.js(
            "const r = document.getElementById('send').getBoundingClientRect();"
            " return r.bottom <= window.innerHeight && r.right <= window.innerWidth && r.height"
        )
        assert composer >= 30
        await save(browser, "screenshot-phone.png", tmp_path)
        await browser.click(".tool button.approve")
        await browser.wait_for(
            "return document.body.dataset.state === 'idle'"
            " && document.querySelector('.tool .output-box .fold') !== null"
        )
        layout = await browser.js(OVERFLOW)
        assert layout["page"] <= layout["width"] and layout["wide"] == [], layout

        # The list, on the phone and on the desktop.
        await browser.click("#back")
        await browser.wait_for("return document.body.dataset.titles === 'loaded'")
        layout = await browser.js(OVERFLOW)
        assert layout["page"] <= layout["width"] and layout["wide"] == [], layout
        await browser.set_size(1100, 820)
        await browser.wait_for("return document.documentElement.clientWidth > 900")
        await save(browser, "screenshot-list.png", tmp_path)
