"""The native codec built with AddressSanitizer and run over mutated wire
bytes and mutated lines for a bounded number of inputs: any out-of-bounds
access, use-after-free or double free aborts the child with ASan's report."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
DRIVER = Path(__file__).with_name("native_asan_driver.py")


def _asan_runtime() -> str | None:
    if shutil.which("gcc") is None:
        return None
    found = subprocess.run(
        ["gcc", "-print-file-name=libasan.so"], capture_output=True, text=True
    ).stdout.strip()
    return found if found.startswith("/") and Path(found).exists() else None


def test_native_codec_under_asan(tmp_path: Path) -> None:
    runtime = _asan_runtime()
    if runtime is None:
        if os.environ.get("OMNI_REQUIRE_TOOLCHAINS") == "1":
            pytest.fail("gcc with libasan is needed for the ASan run of the native codec")
        pytest.skip("no gcc with libasan")
    import sysconfig

    extension = tmp_path / ("_codec" + (sysconfig.get_config_var("EXT_SUFFIX") or ".so"))
    subprocess.run(
        [
            "gcc",
            "-O1",
            "-g",
            "-fsanitize=address,undefined",
            "-fno-omit-frame-pointer",
            "-fno-sanitize-recover=undefined",
            "-fPIC",
            "-shared",
            f"-I{sysconfig.get_paths()['include']}",
            str(ROOT / "src/omni_grpc/convert/_native.c"),
            "-o",
            str(extension),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    env = {
        **os.environ,
        "LD_PRELOAD": runtime,
        # CPython itself is not built for leak checking; memory errors are the point.
        "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1",
        "OMNI_GRPC_NATIVE": "0",  # the driver loads the ASan build itself
    }
    result = subprocess.run(
        [sys.executable, str(DRIVER), str(extension), "20000", "12"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert result.stdout.startswith("ok 20000 runs"), result.stdout
    decoded = int(result.stdout.split()[3])
    assert decoded > 0  # some mutations stay valid: the decoder really ran
