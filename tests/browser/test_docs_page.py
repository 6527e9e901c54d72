"""``/docs`` in real Chromium: the package's own reader of ``/openapi.json``
shows every operation, filters them, and loads nothing from elsewhere."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.browser.serving import page_server
from tests.browser.webdriver import chromium

pytestmark = pytest.mark.browser


def shown(at_most: int) -> str:
    """A script: the operations listed and not filtered out, as "method
    path", once there are some and at most ``at_most``."""
    return f"""
const shown = [...document.querySelectorAll('details')].filter((d) => !d.hidden);
return shown.length > 0 && shown.length <= {at_most} && shown.map((d) =>
  d.querySelector('.method').textContent + ' ' + d.querySelector('.path').textContent);
"""


async def test_the_docs_page_shows_every_operation_and_filters_them(tmp_path: Path) -> None:
    # page_server's app has a token: the document and its page need none.
    async with page_server(tmp_path) as (_, url), chromium() as browser:
        async with httpx.AsyncClient(base_url=url) as http:
            doc = (await http.get("/openapi.json")).json()
        operations = sorted(f"{m} {p}" for p, item in doc["paths"].items() for m in item)
        await browser.get(f"{url}/docs")
        assert sorted(await browser.wait_for(shown(len(operations)))) == operations
        title = await browser.js("return document.getElementById('title').textContent")
        assert title == f"omni-grpc HTTP API {doc['info']['version']}"
        await browser.type("#filter", "approvals post")
        assert await browser.wait_for(shown(1)) == ["post /api/sessions/{sid}/approvals/{call_id}"]
        # One opened: its parameters and body shape are there, as text.
        await browser.click("details:not([hidden]) summary")
        text = await browser.js("return document.querySelector('details[open]').innerText")
        assert "call_id" in text and '"decision"' in text and "204" in text
        # Nothing was refused by the page's Content-Security-Policy, nothing failed.
        errors = [e for e in await browser.console() if e.get("level") == "SEVERE"]
        assert errors == []
