"""The README's Python snippets run as written."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def python_block_after(marker: str) -> str:
    text = (ROOT / "README.md").read_text()
    found = re.search(re.escape(marker) + r".*?```python\n(.*?)```", text, re.S)
    assert found is not None, f"no python block after {marker!r} in README.md"
    return found.group(1)


def test_the_trace_round_trip_snippet_runs(tmp_path: Path) -> None:
    code = python_block_after("In Python, a line is bytes")
    shutil.copy(
        ROOT / "tests" / "conformance" / "trace_basic_tool_turn_001.jsonl",
        tmp_path / "session_001.jsonl",
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    # And it fails loudly on a bad line, naming it.
    (tmp_path / "session_001.jsonl").write_bytes(b'{"timestamp":"t"}\n{oops\n')
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert result.returncode != 0
    assert "ConversionError: line 1: /payload: missing the payload" in result.stderr
