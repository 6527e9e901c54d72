"""The HTTP port over TLS in headless Chromium (issue 42): the page and its
SSE stream, and the connect-web example (Connect proto, JSON, gRPC-Web)
against a server on HTTPS, both over HTTP/2 as Chromium chose it by ALPN
(the Resource Timing API's ``nextHopProtocol``, or the server, says which).

Chromium trusts the test's certificate by its public key's hash
(``--ignore-certificate-errors-spki-list``), the way a browser is pointed
at a private CA's server without touching the system's roots."""

from __future__ import annotations

import base64
import hashlib
import subprocess
from pathlib import Path
from urllib.parse import urlencode

import pytest
from connect_serving import serving
from polyglot.polyglot_builds import build_browser

from omni_grpc.transport.sse.transport import SseTransport
from tests.browser.serving import page_server
from tests.browser.test_connect_web import APPROVAL_CARD, TOKEN, WAIT, send, static_site
from tests.browser.webdriver import chromium

pytestmark = pytest.mark.browser

PROTOCOLS = """
return performance.getEntriesByType('resource').concat(performance.getEntriesByType('navigation'))
  .filter((e) => e.name.startsWith(arguments[0]))
  .map((e) => e.nextHopProtocol)
"""


def trust(certs: Path) -> tuple[str, ...]:
    """The Chromium flag that trusts the test server's key."""
    der = subprocess.run(
        ["openssl", "x509", "-in", str(certs / "server.pem"), "-pubkey", "-noout"],
        capture_output=True, check=True,
    ).stdout  # fmt: skip
    spki = subprocess.run(
        ["openssl", "pkey", "-pubin", "-outform", "der"],
        input=der, capture_output=True, check=True,
    ).stdout  # fmt: skip
    digest = base64.b64encode(hashlib.sha256(spki).digest()).decode()
    return (f"--ignore-certificate-errors-spki-list={digest}",)


async def test_the_page_runs_over_https_and_http2(tmp_path: Path, certs: Path) -> None:
    async with page_server(tmp_path, tls=certs) as (_, url), chromium(trust(certs)) as browser:
        assert url.startswith("https://")
        await browser.get(f"{url}/?access_token=browser-token")
        await browser.type("#prompt", "hello over h2")
        await browser.click("#send")
        await browser.wait_for(
            "return document.body.dataset.state === 'idle'"
            " && document.querySelectorAll('.assistant').length >= 1",
            WAIT,
        )
        said = await browser.js("return document.querySelector('.user').textContent")
        assert said == "hello over h2"
        protocols = await browser.js(PROTOCOLS, url)
        # The page itself and the run's SSE stream, all on HTTP/2.
        assert len(protocols) >= 2 and set(protocols) == {"h2"}, protocols


@pytest.mark.parametrize("protocol", ["connect", "connect-json", "grpc-web"])
async def test_connect_web_over_https_and_http2(tmp_path: Path, certs: Path, protocol: str) -> None:
    page = build_browser()
    async with (
        static_site(page) as site,
        serving(tmp_path / "data", token=TOKEN, cors_origins=[site], tls=certs) as served,
        chromium(trust(certs)) as browser,
    ):
        query = urlencode({"server": served.base_url, "protocol": protocol, "token": TOKEN})
        await browser.get(f"{site}/index.html?{query}")
        await send(browser, "list the workspace")
        await browser.wait_for(APPROVAL_CARD, WAIT)
        await browser.click(".approval button.approve")
        await browser.wait_for(
            "return document.body.dataset.state === 'idle'"
            " && document.getElementById('reply').dataset.done === 'true'",
            WAIT,
        )
        assert await browser.js("return document.body.dataset.error") is None
        reply = await browser.js("return document.getElementById('reply').textContent")
        assert reply
        # Cross-origin timing entries hide the protocol (no Timing-Allow-Origin):
        # the server says what Chromium's connection to it speaks.
        http = next(t for t in served.server.transports if isinstance(t, SseTransport))
        # (A preflight may come on a connection of its own: every one is HTTP/2.)
        versions = http.server.connection_versions()
        assert versions and set(versions) == {"2"}, versions
