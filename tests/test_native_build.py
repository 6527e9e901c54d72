"""The native codec is optional: a failed compile leaves a working install,
and OMNI_GRPC_NATIVE=0 forces the Python codec."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _hook() -> object:
    spec = importlib.util.spec_from_file_location("hatch_build", ROOT / "hatch_build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_compile_error_is_reported_not_raised(tmp_path: Path) -> None:
    source = tmp_path / "src/omni_grpc/convert/_native.c"
    source.parent.mkdir(parents=True)
    source.write_text("this is not C;\n")
    target = tmp_path / "out" / "_codec.so"
    why = _hook().compile_extension(tmp_path, target)  # type: ignore[attr-defined]
    assert why is not None and why.startswith(("compile failed", "no C compiler"))
    assert not target.exists()


def test_the_real_source_compiles(tmp_path: Path) -> None:
    target = tmp_path / "_codec.so"
    why = _hook().compile_extension(ROOT, target)  # type: ignore[attr-defined]
    if why == "no C compiler found":
        return  # nothing to prove without a compiler; the wheel test covers that case
    assert why is None
    assert target.stat().st_size > 0


def test_the_environment_variable_forces_the_python_codec() -> None:
    script = (
        "from omni_grpc.convert import _message, parse_message, serialize_message\n"
        'line = b\'{"timestamp":"t","type":"event_msg","payload":{"type":"request_begin"}}\'\n'
        "assert serialize_message(parse_message(line)) == line\n"
        "print(_message.NATIVE is None)\n"
    )
    env = {**os.environ, "OMNI_GRPC_NATIVE": "0"}
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, check=True, capture_output=True, text=True
    )
    assert out.stdout.strip() == "True"


def test_a_stale_extension_is_set_aside_not_called() -> None:
    """An extension built from older source (a pull without reinstalling)
    lacks entry points the codec calls: it is disabled with a warning that
    says what to run, and the Python codec does the work."""
    script = (
        "import sys, types, warnings\n"
        "stale = types.ModuleType('omni_grpc.convert._codec')\n"
        "for name in ('configure', 'encode', 'decode'):\n"
        "    setattr(stale, name, lambda *args: None)\n"
        "sys.modules['omni_grpc.convert._codec'] = stale\n"
        "with warnings.catch_warnings(record=True) as seen:\n"
        "    warnings.simplefilter('always')\n"
        "    from omni_grpc.convert import _message, parse_message, serialize_message\n"
        'line = b\'{"timestamp":"t","type":"event_msg","payload":{"type":"request_begin"}}\'\n'
        "assert serialize_message(parse_message(line)) == line\n"
        "print(_message.NATIVE is None)\n"
        "print([str(w.message) for w in seen])\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "OMNI_GRPC_NATIVE"}
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, check=True, capture_output=True, text=True
    )
    first, warned = out.stdout.strip().splitlines()
    assert first == "True"
    assert "lacks encode_with_text, encode_text, decode_text" in warned
    assert "pip install -e ." in warned
