"""The built wheel carries the generated code and imports it in a fresh
virtual environment, away from this checkout."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def build_wheel(out: Path, native: bool) -> Path:
    env = {**os.environ, "OMNI_GRPC_BUILD_NATIVE": "1" if native else "0"}
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out)],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        timeout=300,
    )
    (found,) = out.glob("omni_grpc-*.whl")
    return found


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("dist"), native=shutil.which("cc") is not None)


@pytest.fixture(scope="module")
def pure_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("dist-pure"), native=False)


def test_wheel_contains_generated_code(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "omni_grpc_proto/omni/v1/omni_pb2.py" in names
    assert "omni_grpc_proto/omni/v1/agent_service_pb2_grpc.py" in names
    assert "omni_grpc_proto/betterproto/omni/v1/__init__.py" in names
    assert "omni_grpc/py.typed" in names
    # Nothing at top level that another distribution might also claim.
    tops = {name.split("/")[0] for name in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"omni_grpc", "omni_grpc_proto"}


def test_native_codec_is_in_the_wheel_only_when_built(wheel: Path, pure_wheel: Path) -> None:
    def native(path: Path) -> list[str]:
        return [n for n in zipfile.ZipFile(path).namelist() if "/_codec" in n]

    assert native(pure_wheel) == []
    assert pure_wheel.name.endswith("-py3-none-any.whl")
    if shutil.which("cc"):
        assert len(native(wheel)) == 1
        assert not wheel.name.endswith("-none-any.whl")  # a platform wheel


def test_wheel_imports_in_a_fresh_venv(wheel: Path, pure_wheel: Path, tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True, system_site_packages=False)
    python = env_dir / "bin" / "python"
    # Dependencies come from the index; the wheel itself from the file.
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(wheel)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    script = (
        "import omni_grpc.convert as c\n"
        "from omni_grpc_proto.omni.v1 import agent_service_pb2_grpc, omni_pb2\n"
        'line = b\'{"timestamp":"t","type":"event_msg","payload":{"type":"request_begin"}}\'\n'
        "m = c.parse_message(line)\n"
        "assert c.serialize_message(m) == line\n"
        "assert type(c.to_betterproto(m)).__name__ == 'OmniMessage'\n"
        "assert agent_service_pb2_grpc.AgentServiceStub\n"
        "from omni_grpc.convert._native import NATIVE\n"
        "print('ok', NATIVE is not None, omni_pb2.__file__)\n"
    )

    def run() -> str:
        result = subprocess.run(
            [str(python), "-c", script],
            cwd=tmp_path,  # not the checkout: nothing may come from src/
            env={
                k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "OMNI_GRPC_NATIVE")
            },
            check=True,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert str(env_dir) in result.stdout
        return result.stdout

    assert run().startswith(f"ok {shutil.which('cc') is not None} ")
    # The same venv with the pure-Python wheel: everything works without the extension.
    subprocess.run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            "--force-reinstall",
            "--no-deps",
            str(pure_wheel),
        ],
        check=True,
        capture_output=True,
        timeout=600,
    )
    assert run().startswith("ok False ")
