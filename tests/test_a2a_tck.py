"""The official A2A TCK (a2aproject/a2a-tck, branch 1.0-dev, vendored in
third_party/a2a-tck) against a real ``omni-grpc serve``, on each binding.

The TCK's failures must be exactly the ones docs/a2a.md lists, each there
with the spec's words that the test contradicts (or why it cannot pass):
a new failure fails this test, and so does a listed one that passes (the
list would then say something that is no longer true).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TCK = ROOT / "third_party" / "a2a-tck"
DOCS = ROOT / "docs" / "a2a.md"
# The TCK's run on one binding, on a loaded 2-core machine: well under this.
RUN_TIMEOUT = 600


# The failures docs/a2a.md lists ("The official TCK"), as the TCK's pytest
# names them (relative to tests/compatibility); the same on every binding.
def expected(transport: str) -> set[str]:
    artifacts = "core_operations/test_artifacts.py::"
    requirement = "core_operations/test_requirements.py::test_must_requirement"
    return {
        # The TCK's schema forbids the A2A 0.3 fields the card keeps for 0.3 clients.
        "agent_card/test_agent_card.py::TestAgentCardStructure"
        "::test_agent_card_validates_against_schema",
        # The TCK's scripted agent's own answers.
        f"{artifacts}TestTextArtifact::test_task_has_text_artifact[{transport}]",
        f"{artifacts}TestFileArtifact::test_task_has_file_artifact[{transport}]",
        f"{artifacts}TestFileUrlArtifact::test_task_has_file_url_artifact[{transport}]",
        f"{artifacts}TestDataArtifact::test_task_has_data_artifact[{transport}]",
        f"{artifacts}TestMessageResponse::test_returns_message_with_text_part[{transport}]",
        # Requirements whose test expects success where the requirement says error.
        f"{requirement}[CORE-SEND-003-{transport}]",
        f"{requirement}[CORE-MULTI-002a-{transport}]",
    }


TRANSPORTS = ["jsonrpc", "http_json", "grpc"]


@pytest.fixture(scope="module")
def sut(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``omni-grpc serve`` with the demo engine unpaced; its HTTP base URL."""
    work = tmp_path_factory.mktemp("tck-sut")
    log = (work / "stderr.log").open("w")
    process = subprocess.Popen(
        [
            sys.executable, "-m", "omni_grpc", "serve",
            "--grpc-port", "0", "--http-port", "0", "--pacing", "0",
            "--data-dir", str(work / "data"),
        ],
        stdout=subprocess.PIPE, stderr=log, text=True,
    )  # fmt: skip
    assert process.stdout is not None
    banner = []
    for line in process.stdout:
        banner.append(line)
        if line.strip() == "omni-grpc ready":
            break
    else:
        stderr = (work / "stderr.log").read_text()
        raise AssertionError(f"serve exited ({process.wait()}): {stderr}")
    http = re.search(r"HTTP\S* on (https?://[^/\s]+)", "".join(banner))
    assert http is not None, banner
    try:
        yield http.group(1)
    finally:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def run_tck(sut: str, transport: str, report: Path) -> tuple[set[str], int]:
    """The TCK's failed and errored tests on ``transport``, and how many passed."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTEST_ADDOPTS")}
    done = subprocess.run(
        [
            sys.executable, "-m", "pytest", "tests/compatibility/",
            f"--sut-host={sut}", f"--transport={transport}",
            "-q", "--tb=line", "-p", "no:cacheprovider", f"--junitxml={report}",
        ],
        cwd=TCK, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT,
    )  # fmt: skip
    assert report.exists(), done.stdout[-4000:] + done.stderr[-4000:]
    failed: set[str] = set()
    passed = 0
    for case in ET.parse(report).getroot().iter("testcase"):
        outcome = {child.tag for child in case}
        name = _node_id(case)
        if outcome & {"failure", "error"}:
            failed.add(name)
        elif "skipped" not in outcome:
            passed += 1
    return failed, passed


def _node_id(case: ET.Element) -> str:
    """``dir/file.py::Class::test[param]`` from junit's classname and name,
    relative to tests/compatibility."""
    parts = case.get("classname", "").split(".")
    module_end = next(i for i, part in enumerate(parts) if part.startswith("test_"))
    path = "/".join(parts[2 : module_end + 1]) + ".py"
    return "::".join([path, *parts[module_end + 1 :], case.get("name", "")])


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_the_tck_fails_only_where_docs_say_why(sut: str, transport: str, tmp_path: Path) -> None:
    failed, passed = run_tck(sut, transport, tmp_path / "junit.xml")
    listed = expected(transport)
    assert failed == listed, (
        f"new failures: {sorted(failed - listed)}; passing now: {sorted(listed - failed)}"
    )
    assert passed >= 40  # the run reached the server, it did not skip everything


def test_every_expected_failure_is_in_the_docs() -> None:
    text = DOCS.read_text()
    section = text[text.index("## The official TCK") :]
    for transport in TRANSPORTS:
        for name in expected(transport):
            test = name.split("::")[-1].split("[")[0]
            assert test in section, f"docs/a2a.md does not list {name}"
