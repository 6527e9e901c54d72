"""The load and fault suite (benchmarks/soak.py) at CI sizes: every check of
the full run, on fewer streams. The full sizes are in BENCHMARKS.md."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

DRIVER = Path(__file__).parents[2] / "benchmarks" / "soak.py"


def _driver() -> ModuleType:
    spec = importlib.util.spec_from_file_location("omni_soak_driver", DRIVER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


soak = _driver()


def _assert_ok(report: object) -> None:
    assert report.ok, "\n".join(report.failures)  # type: ignore[attr-defined]
    assert report.events > 0  # type: ignore[attr-defined]


async def test_concurrent_grpc_and_sse_streams_lose_nothing(tmp_path: Path) -> None:
    served = soak.start(tmp_path / "data", "--engine-opt", "repeat=2")
    try:
        report = await soak.load(served, grpc_streams=30, sse_readers=15)
    finally:
        soak.stop(served)
    _assert_ok(report)
    assert report.streams == 45


async def test_a_slow_reader_per_transport_gets_all_or_is_told(tmp_path: Path) -> None:
    served = soak.start(tmp_path / "data", "--engine-opt", "repeat=40", "--buffer-events", "300")
    try:
        report = await soak.slow_readers(served)
    finally:
        soak.stop(served)
    _assert_ok(report)


async def test_kill_9_and_restart_leave_valid_traces(tmp_path: Path) -> None:
    _assert_ok(await soak.kill_and_restart(tmp_path / "data", runs=4))


async def test_a_full_disk_fails_runs_and_recovers() -> None:
    try:
        with soak.small_tmpfs() as mountpoint:
            report = await soak.disk_full(mountpoint)
    except subprocess.CalledProcessError as exc:
        message = f"cannot mount a tmpfs: {exc.stderr}"
        if os.environ.get("CI") or os.environ.get("OMNI_REQUIRE_TOOLCHAINS"):
            pytest.fail(message)
        pytest.skip(message)
    _assert_ok(report)
