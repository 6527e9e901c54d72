"""What one turn costs the page, early in a conversation and late in it.

Runs ``--turns`` turns one after another through the built-in page in real
headless Chromium (typed into the composer, sent with Enter, streamed back
over EventSource from a real server running the demo engine with a small
pacing, so every delta arrives as its own event), and reads Chromium's own
counters (CDP ``Performance.getMetrics``) before and after each turn:

* ``LayoutDuration`` + ``RecalcStyleDuration``: the rendering work;
* ``ScriptDuration``: the page's JavaScript;
* ``LayoutCount``: how many layouts the turn forced or needed.

Each turn's figures are the difference of the counters around it. The table
gives the median over a window of turns around each checkpoint (turns 6-10
for "10", 96-100 for "100"), and the ratio of the last checkpoint to the
first: a page whose per-event work is constant in the conversation's length
shows about 1.0; one that lays out the whole log per delta grows with it.

``--compare COMMIT`` first measures the page's files as they were at COMMIT
(read with ``git show``), then this tree's, in the same run.

    .venv/bin/python benchmarks/page_turns.py --turns 100 --compare 3cdb401
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the browser tests' server and WebDriver client

from omni_grpc.engines.demo import DemoEngine  # noqa: E402
from omni_grpc.transport.sse import page  # noqa: E402
from tests.browser.serving import TOKEN, page_server  # noqa: E402
from tests.browser.webdriver import ENTER, Browser, chromium  # noqa: E402

ASSET = page.asset
METRICS = (
    "LayoutDuration",
    "RecalcStyleDuration",
    "ScriptDuration",
    "TaskDuration",
    "LayoutCount",
    "Nodes",
)
WINDOW = 5  # turns per checkpoint


async def metrics(browser: Browser) -> dict[str, float]:
    answer = await browser.cdp("Performance.getMetrics")
    values = {m["name"]: float(m["value"]) for m in answer["metrics"]}
    return {name: values.get(name, 0.0) for name in METRICS}


async def one_turn(browser: Browser, n: int) -> dict[str, float]:
    before = await metrics(browser)
    start = time.perf_counter()
    await browser.type("#prompt", f"turn {n}" + ENTER)
    # The turn is over when its second answer is complete and the run is idle.
    await browser.wait_for(
        f"return document.querySelectorAll('.assistant:not(.streaming)').length === {2 * n}"
        " && document.body.dataset.state === 'idle'",
        timeout=120,
    )
    wall = time.perf_counter() - start
    after = await metrics(browser)
    out = {name: after[name] - before[name] for name in METRICS if name != "Nodes"}
    out["Nodes"] = after["Nodes"]
    out["wall"] = wall
    return out


def serve_page_from(commit: str | None) -> None:
    """Serves the page's files as they were at ``commit`` (None: this tree's)."""
    if commit is None:
        page.asset = ASSET
        return

    def old_asset(name: str) -> bytes:
        path = f"src/omni_grpc/web/{name}"
        return subprocess.run(
            ["git", "-C", str(ROOT), "show", f"{commit}:{path}"], capture_output=True, check=True
        ).stdout

    page.asset = old_asset


async def main(turns: int, pacing: float, commit: str | None) -> None:
    for label in [commit, None] if commit else [None]:
        serve_page_from(label)
        print(f"\n== the page at {label or 'this tree'}")
        await measure(turns, pacing)


async def measure(turns: int, pacing: float) -> None:
    checkpoints = [c for c in (10, 50, 100, 200) if c <= turns] or [turns]
    with tempfile.TemporaryDirectory() as tmp:
        engine = DemoEngine(pacing=pacing)
        async with page_server(Path(tmp), engine) as (_, url), chromium() as browser:
            await browser.get(f"{url}/?access_token={TOKEN}&new=1")
            await browser.cdp("Performance.enable", {"timeDomain": "threadTicks"})
            per_turn = []
            for n in range(1, turns + 1):
                per_turn.append(await one_turn(browser, n))
    rows = []
    for c in checkpoints:
        window = per_turn[max(0, c - WINDOW) : c]
        row = {k: statistics.median(t[k] for t in window) for k in (*METRICS, "wall")}
        rows.append((c, row))
    print(f"demo engine, pacing {pacing} s; median of turns (c-{WINDOW - 1})..c; ms per turn")
    print(
        f"{'turns':>6} {'layout ms':>10} {'style ms':>9} {'script ms':>10} {'tasks ms':>9}"
        f" {'layouts':>8} {'DOM nodes':>10} {'wall s':>7}"
    )
    for c, row in rows:
        print(
            f"{c:>6} {row['LayoutDuration'] * 1000:>10.1f}"
            f" {row['RecalcStyleDuration'] * 1000:>9.1f} {row['ScriptDuration'] * 1000:>10.1f}"
            f" {row['TaskDuration'] * 1000:>9.1f}"
            f" {row['LayoutCount']:>8.0f} {row['Nodes']:>10.0f} {row['wall']:>7.2f}"
        )
    if len(rows) > 1:
        (c0, first), (c1, last) = rows[0], rows[-1]

        def ratio(key: str) -> float:
            return last[key] / first[key] if first[key] else float("nan")

        render0 = first["LayoutDuration"] + first["RecalcStyleDuration"]
        render1 = last["LayoutDuration"] + last["RecalcStyleDuration"]
        print(
            f"turn {c1} / turn {c0}: layout+style x{render1 / render0:.2f},"
            f" script x{ratio('ScriptDuration'):.2f}, tasks x{ratio('TaskDuration'):.2f},"
            f" layouts x{ratio('LayoutCount'):.2f},"
            f" wall x{ratio('wall'):.2f}"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=100)
    parser.add_argument("--pacing", type=float, default=0.005, help="demo seconds per delta")
    parser.add_argument(
        "--compare", metavar="COMMIT", help="first measure the page as it was at COMMIT"
    )
    args = parser.parse_args()
    asyncio.run(main(args.turns, args.pacing, args.compare))
