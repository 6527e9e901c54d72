"""Fixtures for the cross-language tests: built examples and a running Go
AgentService. Every test here is marked ``polyglot``."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from polyglot.polyglot_builds import BUILD_TIMES, GoBuild, build_go, build_java, build_node

LANGUAGES = ("go", "java", "node")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.polyglot)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if BUILD_TIMES:
        shown = ", ".join(
            f"{lang} {'cached' if secs == 0 else f'{secs:.1f}s'}"
            for lang, secs in sorted(BUILD_TIMES.items())
        )
        terminalreporter.write_line(f"polyglot builds: {shown}")


@pytest.fixture(scope="session")
def go_build() -> GoBuild:
    return build_go()


@pytest.fixture(scope="session")
def client_commands(request: pytest.FixtureRequest) -> dict[str, list[str]]:
    """Lazily built command prefixes, so a run of one language builds only it."""
    return {}


@pytest.fixture(params=LANGUAGES)
def client(request: pytest.FixtureRequest, client_commands: dict[str, list[str]]) -> list[str]:
    """The example client of one language, as a command prefix."""
    lang: str = request.param
    if lang not in client_commands:
        if lang == "go":
            client_commands[lang] = [str(build_go().client)]
        elif lang == "java":
            client_commands[lang] = build_java()
        else:
            client_commands[lang] = build_node()
    return client_commands[lang]


@pytest.fixture(scope="session")
def go_server(go_build: GoBuild) -> Iterator[str]:
    """The scripted Go AgentService on a loopback port chosen by the OS."""
    proc = subprocess.Popen(
        [str(go_build.server), "-addr", "127.0.0.1:0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("listening on "):
        proc.kill()
        raise RuntimeError(f"omni-server did not start: {line!r} {proc.stderr.read()!r}")  # type: ignore[union-attr]
    yield line.removeprefix("listening on ").strip()
    proc.terminate()
    proc.wait(timeout=10)
