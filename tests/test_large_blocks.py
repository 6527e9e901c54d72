"""``serve`` keeps large blocks mapped (cli/large_blocks.py, #27)."""

from __future__ import annotations

import ctypes.util

import pytest

from omni_grpc.cli import large_blocks


def test_the_environment_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "131072")
    assert large_blocks.map_large_blocks() is False


def test_glibc_takes_the_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    if ctypes.util.find_library("c") is None:
        pytest.skip("no C library to ask")
    # mallopt returns 1 when glibc took the value (the CI image is Debian's glibc).
    assert large_blocks.map_large_blocks() is True


def test_no_c_library_is_not_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    monkeypatch.setattr(large_blocks.ctypes.util, "find_library", lambda _name: None)
    assert large_blocks.map_large_blocks() is False
