"""The consumer steps each package's README documents, run as written.

A README marks each block a consumer copies with ``<!-- consumer: NAME -->``
right above its fence: ``steps`` is the shell a user types in a new folder,
any other name is a file the user saves there first. ``run_steps`` writes the
files into a fresh folder and runs ``steps`` with bash (``-euo pipefail``), so
a README and its package cannot drift apart unnoticed.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

_BLOCK = re.compile(r"<!-- consumer: (\S+) -->\n```\w*\n(.*?)```\n", re.DOTALL)


def blocks(readme: Path) -> dict[str, str]:
    found: dict[str, str] = {}
    for name, text in _BLOCK.findall(readme.read_text()):
        assert name not in found, f"{readme}: two consumer blocks named {name}"
        found[name] = text
    assert "steps" in found, f"{readme}: no <!-- consumer: steps --> block"
    return found


def run_steps(
    readme: Path, folder: Path, env: dict[str, str], timeout: float = 900
) -> subprocess.CompletedProcess[str]:
    """Saves the README's files in ``folder`` (new and empty) and runs its steps there."""
    folder.mkdir(parents=True)
    documented = blocks(readme)
    for name, text in documented.items():
        if name != "steps":
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).write_text(text)
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", documented["steps"]],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **env},
    )
    assert done.returncode == 0, f"{readme} steps failed:\n{done.stdout}\n{done.stderr}"
    return done
