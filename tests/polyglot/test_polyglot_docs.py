"""docs/polyglot.md, docs/connect.md and the README show the very code the
polyglot and browser tests build and run."""

from __future__ import annotations

from polyglot.doc_snippets import CONNECT_DOC, DOC, README, ROOT, referenced, regions, rendered

SOURCES = [
    p
    for lang, pattern in (("go", "**/*.go"), ("java", "src/**/*.java"), ("node", "src/*.ts"))
    for p in sorted((ROOT / "examples" / lang).glob(pattern))
    if "vendor" not in p.parts
]


def test_doc_snippets_match_the_example_sources() -> None:
    doc = DOC.read_text()
    fix = "run python tests/polyglot/doc_snippets.py"
    assert doc == rendered(doc), f"docs/polyglot.md drifted from examples/: {fix}"


def test_every_marked_region_is_in_the_doc() -> None:
    marked = {(str(path.relative_to(ROOT)), name) for path in SOURCES for name in regions(path)}
    assert marked, "no snippet regions found in examples/"
    assert marked == referenced(DOC.read_text())


def test_readme_snippets_match_the_example_sources() -> None:
    readme = README.read_text()
    shown = referenced(readme)
    assert {
        lang for path, _ in shown for lang in ("go", "java", "node") if f"/{lang}/" in path
    } == {
        "go",
        "java",
        "node",
    }
    fix = "run python tests/polyglot/doc_snippets.py"
    assert readme == rendered(readme), f"README.md drifted from examples/: {fix}"


def test_the_browser_example_in_connect_md_is_its_source() -> None:
    sources = sorted((ROOT / "examples" / "browser" / "src").glob("*.ts"))
    marked = {(str(path.relative_to(ROOT)), name) for path in sources for name in regions(path)}
    assert marked, "no snippet regions found in examples/browser"
    doc = CONNECT_DOC.read_text()
    assert marked == referenced(doc)
    fix = "run python tests/polyglot/doc_snippets.py"
    assert doc == rendered(doc), f"docs/connect.md drifted from examples/browser: {fix}"
