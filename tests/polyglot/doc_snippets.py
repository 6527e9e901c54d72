"""Keeps the code in docs/polyglot.md, docs/connect.md (the browser example)
and the README identical to the examples the tests run.

Example sources mark regions with ``snippet:start NAME`` / ``snippet:end NAME``
comments. In the doc, a ``<!-- snippet: PATH#NAME -->`` line is followed by a
fenced block holding that region, dedented. ``python tests/polyglot/doc_snippets.py``
rewrites the blocks from the sources; the test fails when they drift.
"""

from __future__ import annotations

import re
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "polyglot.md"
CONNECT_DOC = ROOT / "docs" / "connect.md"
README = ROOT / "README.md"
_REGION = re.compile(r"^[ \t]*(?://|#) snippet:(start|end) (\S+)[ \t]*$")
_BLOCK = re.compile(r"<!-- snippet: (\S+)#(\S+) -->\n```(\w*)\n(.*?)```\n", re.DOTALL)


def regions(path: Path) -> dict[str, str]:
    found: dict[str, str] = {}
    open_name: str | None = None
    lines: list[str] = []
    for n, line in enumerate(path.read_text().splitlines(keepends=True), 1):
        match = _REGION.match(line.rstrip("\n"))
        if match and match.group(1) == "start":
            assert open_name is None, f"{path}:{n}: region {open_name} is still open"
            open_name, lines = match.group(2), []
        elif match:
            assert match.group(2) == open_name, f"{path}:{n}: unexpected end {match.group(2)}"
            found[open_name] = textwrap.dedent("".join(lines))
            open_name = None
        elif open_name is not None:
            lines.append(line)
    assert open_name is None, f"{path}: region {open_name} is never closed"
    return found


def rendered(doc: str) -> str:
    """The doc with every snippet block refreshed from its source region."""

    def refresh(match: re.Match[str]) -> str:
        path, name, lang = match.group(1), match.group(2), match.group(3)
        code = regions(ROOT / path)[name]
        return f"<!-- snippet: {path}#{name} -->\n```{lang}\n{code}```\n"

    return _BLOCK.sub(refresh, doc)


def referenced(doc: str) -> set[tuple[str, str]]:
    return {(m.group(1), m.group(2)) for m in _BLOCK.finditer(doc)}


if __name__ == "__main__":
    for doc in (DOC, CONNECT_DOC, README):
        doc.write_text(rendered(doc.read_text()))
    sys.exit(0)
