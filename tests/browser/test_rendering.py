"""What a reply, a tool call and a failed run look like, in real headless Chromium."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.browser.scripted import ScriptedEngine
from tests.browser.serving import TOKEN, page_server
from tests.browser.webdriver import ENTER, ESCAPE, NULL, SHIFT, Browser, chromium

pytestmark = pytest.mark.browser

MARKDOWN = """\
# Release notes
Some **bold**, *slanted*, `inline code`, ~~gone~~, a [safe link](https://example.com/a?b=1)
and a [bad link](javascript:window.__pwned=3) and https://example.org/x.

- one
- two
  - nested

3. third
4. fourth

> quoted words

| name | size |
|------|-----:|
| a.txt | 12 |

```python
print("<b>hi</b>")
```

<script>window.__pwned = 1</script>
<img src=x onerror="window.__pwned = 2">
"""

# Violations of the page's CSP, counted from before the reply arrives.
WATCH_CSP = """
window.__violations = [];
document.addEventListener('securitypolicyviolation',
  (e) => window.__violations.push(e.violatedDirective + ' ' + e.blockedURI));
"""


async def ask(browser: Browser, prompt: str) -> None:
    # Typed, a newline would be Enter (which sends): the text goes in whole.
    await browser.js("document.getElementById('prompt').value = arguments[0]", prompt)
    await browser.type("#prompt", ENTER)


async def idle_after(browser: Browser, count: int) -> None:
    await browser.wait_for(
        "return document.body.dataset.state === 'idle'"
        f" && document.querySelectorAll('.user').length === {count}"
        " && document.querySelector('.streaming') === null"
    )


async def test_markdown_is_rendered_and_markup_is_only_text(tmp_path: Path) -> None:
    async with page_server(tmp_path, ScriptedEngine()) as (_, url), chromium() as browser:
        await browser.get(f"{url}/?access_token={TOKEN}&new=1")
        await browser.js(WATCH_CSP)
        await ask(browser, "say: " + MARKDOWN)
        await idle_after(browser, 1)
        view = await browser.js(
            """
            const a = document.querySelector('.assistant');
            const all = (sel) => [...a.querySelectorAll(sel)].map((e) => e.textContent);
            return {
              h: all('h3'), strong: all('strong'), em: all('em'), code: all('p code'),
              del: all('del'), links: [...a.querySelectorAll('a')].map((e) =>
                [e.textContent, e.getAttribute('href'), e.rel]),
              ul: all(':scope .body > ul > li'), nested: all('ul ul li'),
              ol: all('ol li'), olStart: a.querySelector('ol').start,
              quote: all('blockquote'), th: all('th'), td: all('td'),
              right: [...a.querySelectorAll('.align-right')].length,
              lang: all('.code .lang'), block: all('.code pre code'),
              elements: [...a.querySelectorAll('script, img, iframe, [onerror]')].length,
              text: a.textContent, pwned: window.__pwned === undefined ? null : window.__pwned,
            };
            """
        )
        assert view["h"] == ["Release notes"]
        assert view["strong"] == ["bold"] and view["em"] == ["slanted"]
        assert view["code"] == ["inline code"] and view["del"] == ["gone"]
        assert view["links"] == [
            ["safe link", "https://example.com/a?b=1", "noopener noreferrer"],
            ["https://example.org/x", "https://example.org/x", "noopener noreferrer"],
        ]
        assert "bad link" in view["text"]  # a javascript: target keeps its words, not a link
        assert view["ul"][0] == "one" and view["nested"] == ["nested"]
        assert view["ol"] == ["third", "fourth"] and view["olStart"] == 3
        assert view["quote"] == ["quoted words"]
        assert view["th"] == ["name", "size"] and view["td"] == ["a.txt", "12"]
        assert view["right"] == 2
        assert view["lang"] == ["python"] and view["block"] == ['print("<b>hi</b>")']
        # The injection attempts are characters on the screen, and nothing ran.
        assert view["elements"] == 0 and view["pwned"] is None
        assert "<script>window.__pwned = 1</script>" in view["text"]
        assert '<img src=x onerror="window.__pwned = 2">' in view["text"]
        # The page did all that without tripping its own CSP...
        assert await browser.js("return window.__violations") == []
        # ...which is in force: an inline script is refused.
        blocked = await browser.js(
            """
            const s = document.createElement('script');
            s.textContent = 'window.__inline = 1';
            document.body.append(s);
            return window.__inline === undefined;
            """
        )
        assert blocked
        await browser.wait_for("return window.__violations.length === 1")
        assert (await browser.js("return window.__violations"))[0].startswith("script-src")

        # The code block's copy button copies its text.
        await browser.click(".code button.copy")
        assert (
            await browser.wait_for(
                "const b = document.querySelector('.code button.copy');"
                " return b.textContent !== 'Copy' && b.textContent"
            )
            == "Copied"
        )


async def test_a_long_tool_output_folds_and_shows_its_image(tmp_path: Path) -> None:
    async with page_server(tmp_path, ScriptedEngine()) as (_, url), chromium() as browser:
        await browser.get(f"{url}/?access_token={TOKEN}&new=1")
        await browser.js(WATCH_CSP)
        await ask(browser, "tool: 200")
        await idle_after(browser, 1)
        card = await browser.js(
            """
            const c = document.querySelector('.tool');
            const out = c.querySelector('.output'), fold = c.querySelector('.output-box .fold');
            const img = c.querySelector('img.image');
            const text = (sel) => c.querySelector(sel).textContent;
            return {name: text('.name'), args: text('.args'), decision: text('.decision'),
                    lines: out.textContent.split('\\n').length,
                    height: out.getBoundingClientRect().height, fold: fold.textContent,
                    expanded: fold.getAttribute('aria-expanded'), img: img && img.naturalWidth,
                    stats: document.querySelector('.stats').textContent,
                    meta: document.getElementById('meta').textContent};
            """
        )
        assert card["name"] == "read_file"
        assert card["args"] == '{ "path": "notes/big.txt", "lines": 200 }'
        assert card["decision"] == "allowed (allow all)" and card["lines"] == 200
        assert card["fold"] == "Show all 200 lines" and card["expanded"] == "false"
        assert 100 < card["height"] < 250  # eight lines or so, not two hundred
        assert card["img"] == 48  # decoded from its data: URL, allowed by the CSP
        assert card["stats"].endswith("tokens this turn") and "tokens" in card["meta"]
        await browser.click(".output-box .fold")
        opened = await browser.js(
            "const o = document.querySelector('.tool .output');"
            " const f = document.querySelector('.output-box .fold');"
            " return [o.getBoundingClientRect().height, f.textContent,"
            " f.getAttribute('aria-expanded')]"
        )
        assert opened[0] > 2000 and opened[1:] == ["Show less", "true"]
        await browser.click(".output-box .fold")
        assert await browser.js(
            "return document.querySelector('.tool .output').getBoundingClientRect().height"
        ) == pytest.approx(card["height"])
        assert await browser.js("return window.__violations") == []

        # A call the mode refused says which mode, and that it did not run.
        await browser.js("document.getElementById('mode').value = 'deny-all'")
        await ask(browser, "tool: 3")
        await idle_after(browser, 2)
        denied = await browser.js(
            "const c = [...document.querySelectorAll('.tool')].pop();"
            " return ['.decision', '.state', '.output'].map((s) => c.querySelector(s).textContent)"
        )
        assert denied == ["denied (deny all)", "not run", "Tool call denied by user."]


async def test_a_failed_run_and_a_stopped_one_say_so(tmp_path: Path) -> None:
    async with page_server(tmp_path, ScriptedEngine()) as (_, url), chromium() as browser:
        await browser.get(f"{url}/?access_token={TOKEN}&new=1")
        await ask(browser, "fail")
        await idle_after(browser, 1)
        notes = await browser.js(
            "return [...document.querySelectorAll('.note.error')].map((n) => n.textContent)"
        )
        assert notes == [
            "The model request failed: upstream answered 500",
            "The run failed: llm request error: upstream answered 500",
        ]
        assert await browser.js("return document.querySelectorAll('.assistant').length") == 0

        # A reply that opened but said nothing, stopped with Escape: no empty bubble.
        await ask(browser, "hang")
        await browser.wait_for("return document.body.dataset.state === 'running'")
        assert await browser.js("return document.getElementById('status').textContent") == (
            "Running…"
        )
        await browser.type("#prompt", ESCAPE)
        await idle_after(browser, 2)
        assert await browser.js(
            "return [...document.querySelectorAll('.note')].pop().textContent"
        ) == ("Stopped.")
        assert await browser.js("return document.querySelectorAll('.assistant').length") == 0


async def test_enter_sends_and_shift_enter_adds_a_line(tmp_path: Path) -> None:
    async with page_server(tmp_path, ScriptedEngine()) as (_, url), chromium() as browser:
        await browser.get(f"{url}/?access_token={TOKEN}&new=1")
        await browser.type("#prompt", f"say: first line{SHIFT}{ENTER}{NULL}second line")
        assert await browser.js("return document.querySelectorAll('.user').length") == 0
        assert await browser.js("return document.getElementById('prompt').value") == (
            "say: first line\nsecond line"
        )
        await browser.type("#prompt", ENTER)
        await idle_after(browser, 1)
        assert await browser.js("return document.querySelector('.user').textContent") == (
            "say: first line\nsecond line"
        )
        assert await browser.js("return document.querySelector('.assistant p').innerText") == (
            "first line\nsecond line"
        )
        assert await browser.js("return document.getElementById('prompt').value") == ""
