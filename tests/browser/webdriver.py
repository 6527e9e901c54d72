"""A minimal W3C WebDriver client over httpx, for the system chromedriver."""

from __future__ import annotations

import asyncio
import base64
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

ELEMENT = "element-6066-11e4-a52e-4f735466cecf"
# WebDriver key codes; SHIFT stays down until NULL releases it.
ENTER, ESCAPE, SHIFT, NULL = "\ue007", "\ue00c", "\ue008", "\ue000"
# The flags headless Chromium needs on these machines (root, closed network).
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1100,820",
]


def find_toolchain() -> tuple[str, str]:
    """(chromium, chromedriver) paths; a skip locally, a failure in CI."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if chromium and driver:
        return chromium, driver
    message = "headless Chromium tests need the Debian packages chromium and chromium-driver"
    if os.environ.get("OMNI_REQUIRE_TOOLCHAINS") == "1":
        pytest.fail(message)
    pytest.skip(message)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Browser:
    def __init__(self, http: httpx.AsyncClient, session: str) -> None:
        self.http = http
        self.base = f"/session/{session}"

    async def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        r = await self.http.request(method, self.base + path, json=body)
        value = r.json()["value"]
        if r.status_code >= 400:
            raise AssertionError(f"WebDriver {method} {path}: {value}")
        return value

    async def get(self, url: str) -> None:
        await self._call("POST", "/url", {"url": url})

    async def find(self, css: str) -> str:
        value = await self._call("POST", "/element", {"using": "css selector", "value": css})
        return str(value[ELEMENT])

    async def click(self, css: str) -> None:
        await self._call("POST", f"/element/{await self.find(css)}/click", {})

    async def type(self, css: str, text: str) -> None:
        await self._call("POST", f"/element/{await self.find(css)}/value", {"text": text})

    async def set_size(self, width: int, height: int) -> None:
        await self._call("POST", "/window/rect", {"width": width, "height": height})

    async def js(self, script: str, *args: Any) -> Any:
        return await self._call("POST", "/execute/sync", {"script": script, "args": list(args)})

    async def wait_for(self, script: str, timeout: float = 15.0) -> Any:
        """Polls ``script`` (a JS function body) until it returns something truthy."""
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            value = await self.js(script)
            if value:
                return value
            if asyncio.get_running_loop().time() > deadline:
                page = await self.js(
                    "return JSON.stringify({data: document.body.dataset,"
                    " text: document.body.innerText.slice(-800)})"
                )
                raise AssertionError(f"timed out waiting for: {script}\npage: {page}")
            await asyncio.sleep(0.1)

    async def console(self) -> list[dict[str, Any]]:
        """The page's console entries since the last call (level, message)."""
        entries: list[dict[str, Any]] = await self._call("POST", "/se/log", {"type": "browser"})
        return entries

    async def cdp(self, command: str, params: dict[str, Any] | None = None) -> Any:
        """A Chrome DevTools Protocol command (chromedriver's goog/cdp/execute)."""
        return await self._call(
            "POST", "/goog/cdp/execute", {"cmd": command, "params": params or {}}
        )

    async def screenshot(self) -> bytes:
        return base64.b64decode(await self._call("GET", "/screenshot"))


@asynccontextmanager
async def chromium(args: tuple[str, ...] = ()) -> AsyncIterator[Browser]:
    """``args``: Chromium flags beside the usual ones (a certificate to trust)."""
    binary, driver = find_toolchain()
    port = _free_port()
    profile = tempfile.mkdtemp(prefix="omni-chromium-")
    proc = subprocess.Popen(
        [driver, f"--port={port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=60) as http:
            # chromedriver can take many seconds to listen on a loaded machine: wait for
            # its readiness (bounded only against a hang), and say so if it never comes.
            deadline = asyncio.get_running_loop().time() + 60
            while True:
                try:
                    if (await http.get("/status")).json()["value"]["ready"]:
                        break
                except httpx.TransportError:
                    pass
                assert proc.poll() is None, f"chromedriver exited with {proc.returncode}"
                assert asyncio.get_running_loop().time() < deadline, "chromedriver never ready"
                await asyncio.sleep(0.1)
            caps = {
                "browserName": "chrome",
                "goog:chromeOptions": {
                    "binary": binary,
                    "args": [*CHROMIUM_ARGS, *args, f"--user-data-dir={profile}"],
                },
                # Keeps the console's entries for Browser.console().
                "goog:loggingPrefs": {"browser": "ALL"},
            }
            r = await http.post("/session", json={"capabilities": {"alwaysMatch": caps}})
            assert r.status_code == 200, r.text
            session = r.json()["value"]["sessionId"]
            try:
                yield Browser(http, session)
            finally:
                await http.delete(f"/session/{session}")
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(profile, ignore_errors=True)
