"""Builds the optional native codec (src/omni_grpc/convert/_native.c) into
every wheel, editable ones included, with the system C compiler.

The extension is optional by design: no compiler, a compile error, or
``OMNI_GRPC_BUILD_NATIVE=0`` leaves a pure-Python wheel (the Python codec is
complete), with one line on stderr saying why. Nothing here may fail a build.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

SOURCE = Path("src/omni_grpc/convert/_native.c")
MODULE = "omni_grpc/convert/_codec"


def _compiler() -> list[str] | None:
    configured = shlex.split(sysconfig.get_config_var("CC") or "")
    for candidate in (configured, [os.environ.get("CC", "")], ["cc"], ["gcc"], ["clang"]):
        if candidate and candidate[0] and shutil.which(candidate[0]):
            return candidate
    return None


def compile_extension(root: Path, target: Path) -> str | None:
    """Compiles the extension to ``target``; returns None, or why it did not."""
    cc = _compiler()
    if cc is None:
        return "no C compiler found"
    include = sysconfig.get_paths()["include"]
    if not Path(include, "Python.h").exists():
        return f"no Python.h in {include}"
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        built = Path(tmp, target.name)
        command = [
            *cc,
            "-O2",
            "-fPIC",
            "-shared",
            "-fvisibility=hidden",
            f"-I{include}",
            str(root / SOURCE),
            "-o",
            str(built),
        ]
        try:
            result = subprocess.run(command, capture_output=True, text=True, timeout=300)
        except (OSError, subprocess.SubprocessError) as exc:
            return f"compiler did not run: {exc}"
        if result.returncode != 0:
            return "compile failed: " + (result.stderr.strip().splitlines() or ["?"])[-1]
        shutil.move(str(built), target)  # whole file or nothing
    return None


class NativeCodecHook(BuildHookInterface):  # type: ignore[type-arg]
    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        if self.target_name != "wheel" or os.environ.get("OMNI_GRPC_BUILD_NATIVE") == "0":
            return
        root = Path(self.root)
        name = MODULE + (sysconfig.get_config_var("EXT_SUFFIX") or ".so")
        try:
            if version == "editable":
                # Editable installs import from src/: build beside the sources.
                target = root / "src" / name
                why = compile_extension(root, target)
            else:
                target = Path(self.directory, ".native", name)
                why = compile_extension(root, target)
                if why is None:
                    build_data["force_include"][str(target)] = name
                    build_data["pure_python"] = False
                    build_data["infer_tag"] = True
        except Exception as exc:  # never fail a build over an optional part
            why = f"{type(exc).__name__}: {exc}"
        if why is not None:
            message = f"omni-grpc: native codec not built ({why}); using the Python codec"
            print(message, file=sys.stderr)
