"""What the page shows of states beside a conversation, in real Chromium:
the session's approval mode, a server that drains or is gone, a call that
never ran, a session that does not exist, a server that wants a token."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from omni_grpc.engines.demo import DemoEngine
from omni_grpc.runtime.resumption import ResumeLimits
from tests.browser.scripted import ScriptedEngine
from tests.browser.serving import AUTH, TOKEN, page_server, run_turns
from tests.browser.webdriver import ENTER, Browser, chromium

pytestmark = pytest.mark.browser

MODE = "return document.getElementById('mode').value"
SEND_OFF = "return document.getElementById('send').disabled"
BANNER = "const b = document.getElementById('banner'); return !b.hidden && b.textContent"
ASKING = "return document.querySelector('.tool button.approve') !== null"


async def pick_mode(browser: Browser, mode: str) -> None:
    """Chooses a mode as a person does: the select changes, and says so."""
    await browser.js(
        "const s = document.getElementById('mode'); s.value = arguments[0];"
        " s.dispatchEvent(new Event('change'));",
        mode,
    )


async def session_mode(url: str, session: str) -> str:
    async with httpx.AsyncClient(base_url=url, headers=AUTH, timeout=30) as http:
        r = await http.get(f"/api/sessions/{session}")
        assert r.status_code == 200, r.text
        mode: str = r.json()["session"]["approvalMode"]
        return mode


async def test_the_approval_mode_belongs_to_the_session(tmp_path: Path) -> None:
    async with page_server(tmp_path, DemoEngine()) as (_, url), chromium() as browser:
        await browser.get(f"{url}/?access_token={TOKEN}&new=1")
        assert await browser.js(MODE) == "allow-all"  # the server's default, first time
        await pick_mode(browser, "ask")
        await browser.type("#prompt", "first" + ENTER)
        await browser.wait_for(ASKING)
        session = await browser.js("return document.body.dataset.session")
        # The session itself is in "ask me" (the reference's always-ask), not only its task.
        assert await session_mode(url, session) == "always-ask"
        await browser.click(".tool button.approve")
        await browser.wait_for("return document.body.dataset.state === 'idle'")

        # A reload, the list, a shared link in a browser that never chose a
        # mode: each shows the session's mode, and the next turn asks again.
        await browser.js("location.reload()")
        await browser.wait_for("return document.querySelectorAll('.assistant').length === 2")
        assert await browser.js(MODE) == "ask"
        await browser.type("#prompt", "second" + ENTER)
        await browser.wait_for(ASKING)
        await browser.click(".tool button.deny")
        await browser.wait_for("return document.body.dataset.state === 'idle'")
        await browser.get(f"{url}/?access_token={TOKEN}")
        await browser.wait_for("return document.querySelectorAll('.session-link').length === 1")
        await browser.click(".session-link")
        await browser.wait_for("return document.querySelectorAll('.assistant').length === 4")
        assert await browser.js(MODE) == "ask"
        async with chromium() as fresh:
            await fresh.get(f"{url}/?access_token={TOKEN}&session={session}")
            await fresh.wait_for("return document.querySelectorAll('.assistant').length === 4")
            assert await fresh.js(MODE) == "ask"
            await fresh.type("#prompt", "third" + ENTER)
            await fresh.wait_for(ASKING)
            await fresh.click(".tool button.approve")
            await fresh.wait_for(
                "return document.body.dataset.state === 'idle'"
                " && document.querySelectorAll('.assistant').length === 6"
            )
            # That browser's own first choice is still the server's default.
            await fresh.get(f"{url}/?access_token={TOKEN}&new=1")
            assert await fresh.js(MODE) == "allow-all"

        # Changing the selector changes the session's mode, at once.
        await pick_mode(browser, "deny-all")
        await browser.wait_for(
            "return document.getElementById('mode').dataset.session === 'deny-all'"
        )
        assert await session_mode(url, session) == "deny-all"
        await browser.js("location.reload()")
        await browser.wait_for("return document.querySelectorAll('.assistant').length === 6")
        assert await browser.js(MODE) == "deny-all"

        # A new session starts from the user's last choice, and is born with it.
        await browser.get(f"{url}/?access_token={TOKEN}&new=1")
        assert await browser.js(MODE) == "deny-all"
        await browser.type("#prompt", "a new one" + ENTER)
        await browser.wait_for(
            "return document.body.dataset.state === 'idle'"
            " && document.querySelector('.tool .decision.deny') !== null"
        )
        created = await browser.js("return document.body.dataset.session")
        assert created != session
        assert await session_mode(url, created) == "deny-all"


async def test_a_drain_and_a_shutdown_are_said_and_the_call_shows_not_run(
    tmp_path: Path,
) -> None:
    # Resumption off: this is the stop that ends the run (with it on, the
    # shutdown of a drain hands the run over to the next start instead).
    off = ResumeLimits(runs=0)
    async with page_server(tmp_path, DemoEngine(), resume=off) as (hub, url), chromium() as browser:
        await browser.get(f"{url}/?access_token={TOKEN}&new=1")
        await pick_mode(browser, "ask")
        await browser.type("#prompt", "before the drain" + ENTER)
        await browser.wait_for(ASKING)
        assert await browser.js(SEND_OFF) is True  # a run is on

        # Draining: the page says the server is stopping and what to do.
        hub.drain()
        message = await browser.wait_for(BANNER)
        assert "shutting down" in message and "Answer the waiting approval" in message
        # The approval can still be answered; nothing new can start.
        assert (
            await browser.js("return document.querySelector('.tool button.approve').disabled")
            is False
        )
        assert await browser.js("return document.getElementById('status').textContent") == (
            "Approval needed"
        )

        # The shutdown stops the run: the call it waited on never ran, and says so.
        await hub.shutdown()
        await browser.wait_for(
            "return document.querySelector('.tool').dataset.state === 'not run'"
            " && document.querySelector('.tool .ask') === null"
            " && document.body.dataset.state !== 'running'",
        )
        assert await browser.js("return document.querySelector('.tool .state').textContent") == (
            "not run"
        )
        notes = await browser.js(
            "return [...document.querySelectorAll('.note')].map((n) => n.textContent)"
        )
        assert "Stopped: server shutting down." in notes
        assert await browser.js(SEND_OFF) is True  # still draining: no new run
        assert "shutting down" in await browser.wait_for(BANNER)
        assert await browser.js("return document.getElementById('status').textContent") == (
            "Shutting down"
        )


async def test_a_call_cut_off_by_a_stop_reads_interrupted(tmp_path: Path) -> None:
    async with page_server(tmp_path, ScriptedEngine()) as (_, url), chromium() as browser:
        await browser.get(f"{url}/?access_token={TOKEN}&new=1")
        await browser.type("#prompt", "tool-hang" + ENTER)
        await browser.wait_for(
            "const t = document.querySelector('.tool');"
            " return t && t.querySelector('.decision.allow') !== null"
            " && t.dataset.state === 'running'"
        )
        await browser.click("#abort")
        await browser.wait_for(
            "return document.body.dataset.state === 'idle'"
            " && document.querySelector('.tool').dataset.state === 'interrupted'"
        )
        assert await browser.js("return document.querySelector('.tool .state').textContent") == (
            "interrupted"
        )
        notes = await browser.js(
            "return [...document.querySelectorAll('.note')].map((n) => n.textContent)"
        )
        assert notes == ["Stopped."]


async def test_send_is_off_while_the_server_is_down_and_back_on_when_it_returns(
    tmp_path: Path,
) -> None:
    async with chromium() as browser:
        async with page_server(tmp_path, DemoEngine()) as (_, url):
            port = int(url.rsplit(":", 1)[1])
            session = await run_turns(url, ["before"])
            await browser.get(f"{url}/?access_token={TOKEN}&session={session}")
            await browser.wait_for("return document.querySelectorAll('.assistant').length === 2")
            assert await browser.js(SEND_OFF) is False
        # Gone: said in words, Send off, the prompt typed meanwhile kept.
        await browser.wait_for(
            "return document.body.dataset.state === 'offline'"
            " && document.getElementById('send').disabled"
        )
        assert "Cannot reach the server" in await browser.wait_for(BANNER)
        assert await browser.js("return document.getElementById('status').textContent") == (
            "Offline"
        )
        await browser.type("#prompt", "while it is down" + ENTER)
        assert await browser.js("return document.getElementById('prompt').value") == (
            "while it is down"
        )
        assert await browser.js("return document.querySelectorAll('.user').length") == 1
        # Back: the page finds it by itself and Send works again.
        async with page_server(tmp_path, DemoEngine(), port=port):
            await browser.wait_for(
                "return !document.getElementById('send').disabled"
                " && document.getElementById('banner').hidden"
                " && document.body.dataset.state === 'idle'",
                timeout=30,
            )
            await browser.click("#send")
            await browser.wait_for(
                "return document.body.dataset.state === 'idle'"
                " && document.querySelectorAll('.assistant').length === 4"
            )
            users = "return [...document.querySelectorAll('.user')].map((e) => e.textContent)"
            assert await browser.js(users) == ["before", "while it is down"]


async def test_an_unknown_session_is_named_as_such(tmp_path: Path) -> None:
    async with page_server(tmp_path) as (_, url), chromium() as browser:
        await browser.get(f"{url}/?access_token={TOKEN}&session=session-that-never-was")
        await browser.wait_for("return document.body.dataset.state === 'unknown'")
        assert await browser.js("return document.getElementById('title').textContent") == (
            "Session not found"
        )
        assert await browser.js("return document.getElementById('status').textContent") == (
            "Not found"
        )
        assert await browser.js("return document.title") == "Session not found · omni-grpc"


async def test_the_page_asks_for_the_token_and_keeps_it_for_the_tab(tmp_path: Path) -> None:
    async with page_server(tmp_path, DemoEngine()) as (_, url), chromium() as browser:
        session = await run_turns(url, ["behind a token"])
        await browser.get(f"{url}/")
        await browser.wait_for("return !document.getElementById('token').hidden")
        assert await browser.js("return document.getElementById('token-why').textContent") == (
            "This server needs an access token (the one serve was started with):"
        )
        assert await browser.js(SEND_OFF) is True
        assert await browser.js("return document.getElementById('token-input').type") == "password"
        # A wrong one is refused in words, and the field comes back.
        await browser.type("#token-input", "not-it" + ENTER)
        await browser.wait_for(
            "return !document.getElementById('token').hidden"
            " && document.getElementById('token-why').textContent.includes('refused')"
        )
        await browser.js("document.getElementById('token-input').value = ''")
        await browser.type("#token-input", TOKEN + ENTER)
        await browser.wait_for(
            f"return document.querySelector(\".session-link[data-session-id='{session}']\")"
            " !== null"
        )
        assert await browser.js("return document.getElementById('token').hidden") is True
        # Kept for the tab, never written into an address.
        assert await browser.js("return sessionStorage.getItem('omni-grpc:token')") == TOKEN
        assert "access_token" not in await browser.js("return location.href")
        href = await browser.js(
            "return document.querySelector('.session-link').getAttribute('href')"
        )
        assert "access_token" not in href
        # The session opens and streams with it (EventSource included).
        await browser.click(".session-link")
        await browser.wait_for("return document.querySelectorAll('.assistant').length === 2")
        await browser.type("#prompt", "and again" + ENTER)
        await browser.wait_for(
            "return document.body.dataset.state === 'idle'"
            " && document.querySelectorAll('.assistant').length === 4"
        )


async def test_a_prompt_sent_before_the_token_is_given_is_kept(tmp_path: Path) -> None:
    async with page_server(tmp_path, DemoEngine()) as (_, url), chromium() as browser:
        await browser.set_size(390, 760)  # a phone: the field fits the width
        await browser.get(f"{url}/?new=1")
        await browser.type("#prompt", "my first question" + ENTER)
        await browser.wait_for("return !document.getElementById('token').hidden")
        widths = await browser.js(
            "return [document.documentElement.scrollWidth, document.documentElement.clientWidth]"
        )
        assert widths[0] == widths[1], widths
        await browser.type("#token-input", TOKEN + ENTER)
        # The page starts over with the token, the prompt still in the box.
        await browser.wait_for(
            "return document.getElementById('token').hidden"
            " && document.getElementById('prompt').value === 'my first question'"
        )
        await browser.type("#prompt", ENTER)
        await browser.wait_for(
            "return document.body.dataset.state === 'idle'"
            " && document.querySelectorAll('.assistant').length === 2"
        )
        users = "return [...document.querySelectorAll('.user')].map((e) => e.textContent)"
        assert await browser.js(users) == ["my first question"]
        assert "access_token" not in await browser.js("return location.href")
