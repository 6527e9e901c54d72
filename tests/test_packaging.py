"""packaging/: the container image definition and the systemd unit.

The image is linted with hadolint (a docker daemon is not available on every
machine that runs the tests; where ``docker info`` answers, it is also built
and its health check awaited), its health check command is run against a real
server, and the unit passes ``systemd-analyze verify`` and keeps a low
``systemd-analyze security`` exposure.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ServeProcess

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "packaging" / "container" / "Dockerfile"
UNIT = ROOT / "packaging" / "systemd" / "omni-grpc.service"


def _tool(name: str) -> str:
    found = shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))
    if found is None:
        pytest.fail(f"{name} is missing: scripts/setup installs it")
    return found


def _instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined."""
    joined = re.sub(r"\\\n\s*", " ", text)
    found = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            found.append((word.upper(), rest.strip()))
    return found


def test_the_dockerfile_passes_hadolint() -> None:
    done = subprocess.run([_tool("hadolint"), str(DOCKERFILE)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    # The linter does fail on a bad definition (this test is not vacuous).
    bad = subprocess.run(
        [_tool("hadolint"), "-"], input="FROM python\nRUN apt-get install curl\n",
        capture_output=True, text=True,
    )  # fmt: skip
    assert bad.returncode != 0


def test_the_image_is_multi_stage_non_root_and_health_checked() -> None:
    steps = _instructions(DOCKERFILE.read_text())
    stages = [args for word, args in steps if word == "FROM"]
    assert len(stages) >= 2 and all(" AS " in s.upper() for s in stages), stages
    last_from = max(i for i, (word, _) in enumerate(steps) if word == "FROM")
    users = [args for word, args in steps[last_from:] if word == "USER"]
    assert users and users[-1].split(":")[0] not in ("root", "0"), users
    [check] = [args for word, args in steps if word == "HEALTHCHECK"]
    assert "/healthz" in check
    # The runtime stage has no compiler: only the build stage installs one.
    assert not any("gcc" in args for word, args in steps[last_from:] if word == "RUN")


def _healthcheck_command(port: int) -> list[str]:
    [check] = [
        args for word, args in _instructions(DOCKERFILE.read_text()) if word == "HEALTHCHECK"
    ]
    command: list[str] = json.loads(check[check.index("CMD") + 3 :].strip())
    return [sys.executable if command[0] == "python" else command[0],
            *(part.replace(":8080/", f":{port}/") for part in command[1:])]  # fmt: skip


def test_the_health_check_command_reads_healthz(serve_process: ServeProcess) -> None:
    served = serve_process()
    assert served.http_address is not None
    port = int(served.http_address.rsplit(":", 1)[1])
    healthy = subprocess.run(_healthcheck_command(port), capture_output=True, timeout=30)
    assert healthy.returncode == 0, healthy.stderr
    served.process.terminate()
    served.process.wait(30)
    gone = subprocess.run(_healthcheck_command(port), capture_output=True, timeout=30)
    assert gone.returncode != 0


def test_the_image_builds_where_a_docker_daemon_runs(tmp_path: Path) -> None:
    docker = shutil.which("docker")
    if docker is None or subprocess.run([docker, "info"], capture_output=True).returncode != 0:
        pytest.skip("no docker daemon here: the definition is linted instead")
    tag = f"omni-grpc-test:{tmp_path.name.lower()}"
    built = subprocess.run(
        [docker, "build", "-f", str(DOCKERFILE), "-t", tag, str(ROOT)],
        capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr[-4000:]
    user = subprocess.run(
        [docker, "image", "inspect", "-f", "{{.Config.User}}", tag], capture_output=True, text=True
    )
    assert user.stdout.strip() not in ("", "root", "0")


def _unit_with_executable(tmp_path: Path, text: str) -> Path:
    """The unit with ExecStart pointing at this environment's omni-grpc:
    verify checks the executable exists."""
    executable = Path(sys.executable).parent / "omni-grpc"
    unit = tmp_path / "omni-grpc.service"
    unit.write_text(text.replace("/usr/local/bin/omni-grpc", str(executable)))
    return unit


def _verify(unit: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [_tool("systemd-analyze"), "verify", "--man=no", str(unit)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_the_systemd_unit_verifies_and_is_sandboxed(tmp_path: Path) -> None:
    text = UNIT.read_text()
    done = _verify(_unit_with_executable(tmp_path, text))
    # verify exits 0 on settings it ignores; what it says is the verdict.
    assert done.returncode == 0 and done.stderr.strip() == "", done.stderr
    settings = dict(
        line.split("=", 1) for line in text.splitlines() if "=" in line and line[:1].isalpha()
    )
    assert settings["ProtectSystem"] == "strict"
    assert settings["DynamicUser"] == "yes"
    assert settings["StateDirectory"] == "omni-grpc"
    assert "${STATE_DIRECTORY}" in settings["ExecStart"]
    security = subprocess.run(
        [_tool("systemd-analyze"), "security", "--offline=yes", "--no-pager",
         str(_unit_with_executable(tmp_path, text))],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    match = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", security.stdout)
    assert match, security.stdout + security.stderr
    assert float(match.group(1)) <= 2.0, security.stdout


def test_verify_reports_a_broken_unit(tmp_path: Path) -> None:
    broken = UNIT.read_text().replace("ProtectSystem=strict", "ProtectSystem=sometimes")
    done = _verify(_unit_with_executable(tmp_path, broken))
    assert "ProtectSystem" in done.stderr or "protect system" in done.stderr.lower()
