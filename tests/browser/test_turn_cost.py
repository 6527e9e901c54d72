"""What a streamed turn costs the page, counted rather than timed, in real
Chromium deep into a conversation.

What made a turn cost more as the conversation grew was not the number of
layouts but what each one covered: the log was one flat column of every
card (and a flex item sized by its content), so each layout went over all of
it. Here the log is one box per turn, and an event changes nothing but its
own turn: the test watches every mutation of the log during a turn and finds
all of them inside the newest turn. It also bounds the layouts by the frames
Chromium rendered (the page renders once per animation frame). The time per
turn at 10 and 100 turns is benchmarks/page_turns.py's."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.browser.scripted import ScriptedEngine
from tests.browser.serving import TOKEN, page_server, run_turns
from tests.browser.webdriver import ENTER, chromium

pytestmark = pytest.mark.browser

WORDS = 400  # deltas in the measured turn, sent as fast as the server can

# The test's own watch over the page: rendered frames (an animation-frame loop),
# and every mutation of the log with whether it fell inside the newest turn.
WATCH = """
const log = document.getElementById('log');
window.watch = {frames: 0, inside: 0, outside: [], on: true};
const tick = () => { if (watch.on) { watch.frames++; requestAnimationFrame(tick); } };
requestAnimationFrame(tick);
new MutationObserver((records) => {
  for (const r of records) {
    const turns = log.querySelectorAll(':scope > .turn');
    const last = turns[turns.length - 1];
    const node = r.target.nodeType === 1 ? r.target : r.target.parentElement;
    if (last && last.contains(node)) watch.inside++;
    // The log itself: the new turn's box added, or its busy flag for the run.
    else if (node === log && r.type === 'childList' && r.removedNodes.length === 0
             && [...r.addedNodes].every((n) => n === last)) watch.inside++;
    else if (node === log && r.attributeName === 'aria-busy') watch.inside++;
    else watch.outside.push(node.className || node.nodeName);
  }
}).observe(log, {childList: true, subtree: true, characterData: true, attributes: true});
"""


async def test_a_long_turn_lays_out_per_frame_and_touches_only_its_own_turn(
    tmp_path: Path,
) -> None:
    async with page_server(tmp_path, ScriptedEngine()) as (_, url), chromium() as browser:
        prompts = [f"say: turn {n} of the conversation, with a `code` span." for n in range(40)]
        session = await run_turns(url, prompts)
        await browser.get(f"{url}/?access_token={TOKEN}&session={session}")
        await browser.wait_for("return document.querySelectorAll('.assistant').length === 20")
        await browser.wait_for("return document.body.dataset.state === 'idle'")
        await browser.cdp("Performance.enable", {"timeDomain": "threadTicks"})

        async def layouts() -> float:
            answer = await browser.cdp("Performance.getMetrics")
            return float(next(m["value"] for m in answer["metrics"] if m["name"] == "LayoutCount"))

        # The prompt is put in whole: typed key by key, each key lays out the textarea.
        words = " ".join(f"w{n}" for n in range(WORDS))
        await browser.js("document.getElementById('prompt').value = arguments[0]", f"say: {words}")
        await browser.js(WATCH)
        before = await layouts()
        start = time.monotonic()
        await browser.type("#prompt", ENTER)
        # (No innerText here: reading it would lay the page out for the test.)
        await browser.wait_for(
            "const a = [...document.querySelectorAll('.assistant')].pop();"
            f" return a.textContent.endsWith('w{WORDS - 1}')"
            " && !a.classList.contains('streaming')"
            " && document.body.dataset.state === 'idle'",
            timeout=60,
        )
        seconds = time.monotonic() - start
        watch = await browser.js("watch.on = false; return watch")
        count = await layouts() - before

        # Every delta was its own event; the page laid out once per frame it
        # rendered (and at most once per 250 ms fallback of a tab that renders
        # none), never once per event as a per-event scroll read would.
        assert watch["frames"] > 0
        bound = watch["frames"] + 4 * seconds + 5
        assert count <= bound, (count, watch["frames"], seconds)
        assert count < WORDS / 4, (count, watch["frames"])
        # Nothing outside the newest turn moved: the older 20 turns cost nothing.
        assert watch["inside"] > 0
        assert watch["outside"] == [], watch["outside"][:10]
        assert await browser.js("return document.querySelectorAll('#log > .turn').length") == 21
