"""The Markdown renderer against a seeded corpus of hostile text, in real Chromium.

Whatever the text, the nodes built are only the renderer's own tags with its
own attributes, every link goes to http(s) or mailto, and nothing runs.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from tests.browser.serving import TOKEN, page_server
from tests.browser.webdriver import chromium

pytestmark = pytest.mark.browser

PIECES = [
    "<script>window.__pwned=1</script>",
    "<img src=x onerror=window.__pwned=2>",
    "<svg onload=window.__pwned=3>",
    '<a href="javascript:window.__pwned=4">x</a>',
    "[x](javascript:window.__pwned=5)",
    "[x](JaVaScRiPt:alert(1))",
    "[x]( javascript:1)",
    "[x](data:text/html,<script>1</script>)",
    "![i](https://evil.example/i.png)",
    '[ok](https://example.com/?a=<b>&c="d")',
    "<https://example.com>",
    "https://x.example/a_b*c",
    "**",
    "*",
    "_",
    "__",
    "~~",
    "`",
    "```",
    "```js",
    "~~~",
    "#",
    "## h",
    ">",
    "> q",
    "-",
    "- i",
    "1.",
    "2) i",
    "|",
    "| a | b |",
    "|---|:-:|",
    "\\",
    "\\*",
    "&lt;",
    "&#x3C;script&#x3E;",
    "\u202e",
    "\u0000",
    "\n",
    "\n\n",
    "  ",
    "    code",
    "word",
    "é",
    "🙂",
    "<!--",
    "-->",
    "<style>*{display:none}</style>",
    "<iframe src=//evil.example>",
    '" onmouseover="x',
]
ALLOWED_TAGS = {
    "P",
    "BR",
    "H3",
    "H4",
    "H5",
    "H6",
    "STRONG",
    "EM",
    "DEL",
    "CODE",
    "PRE",
    "A",
    "UL",
    "OL",
    "LI",
    "BLOCKQUOTE",
    "HR",
    "TABLE",
    "THEAD",
    "TBODY",
    "TR",
    "TH",
    "TD",
    "DIV",
    "SPAN",
    "BUTTON",
}
ALLOWED_ATTRIBUTES = {"class", "href", "target", "rel", "start", "type", "aria-label"}

RENDER_ALL = """
const out = [];
for (const text of arguments[0]) {
  const box = document.createElement('div');
  box.append(window.renderMarkdown(text));
  const nodes = [...box.querySelectorAll('*')];
  out.push({
    tags: [...new Set(nodes.map((n) => n.tagName))],
    attrs: [...new Set(nodes.flatMap((n) => [...n.attributes].map((a) => a.name)))],
    hrefs: [...box.querySelectorAll('[href]')].map((a) => a.getAttribute('href')),
    rels: [...box.querySelectorAll('a')].map((a) => a.rel),
  });
}
return {out, pwned: window.__pwned === undefined ? null : window.__pwned};
"""


def corpus(seed: int, count: int) -> list[str]:
    rng = random.Random(seed)
    texts = []
    for _ in range(count):
        parts = [rng.choice(PIECES) for _ in range(rng.randint(1, 25))]
        texts.append("".join(p + rng.choice(["", " ", "\n", "\n\n"]) for p in parts))
    return texts


async def test_hostile_text_builds_only_safe_nodes(tmp_path: Path) -> None:
    texts = corpus(seed=23, count=400)
    async with page_server(tmp_path) as (_, url), chromium() as browser:
        await browser.get(f"{url}/?access_token={TOKEN}&new=1")
        await browser.wait_for("return typeof window.renderMarkdown === 'function'")
        result = await browser.js(RENDER_ALL, texts)
        assert result["pwned"] is None
        for text, seen in zip(texts, result["out"], strict=True):
            where = json.dumps(text)[:300]
            assert set(seen["tags"]) <= ALLOWED_TAGS, where
            assert set(seen["attrs"]) <= ALLOWED_ATTRIBUTES, where
            for href in seen["hrefs"]:
                assert href.startswith(("https://", "http://", "mailto:")), (href, where)
            assert all(rel == "noopener noreferrer" for rel in seen["rels"]), where
