"""``serve`` refuses bad settings at startup: exit 2, naming the flag."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


def serve(*args: str) -> subprocess.CompletedProcess[str]:
    # Never reaches "ready": each case must fail before binding anything.
    return subprocess.run(
        [sys.executable, "-m", "omni_grpc", "serve", "--grpc-port", "0", "--http-port", "0", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--grpc-port", "99999"),
        ("--grpc-port", "-1"),
        ("--grpc-port", "80x"),
        ("--http-port", "65536"),
        ("--pacing", "nan"),
        ("--pacing", "-1"),
        ("--sse-heartbeat", "inf"),
        ("--shutdown-grace", "-0.5"),
        ("--http-max-body", "0"),
        ("--max-message-bytes", "4294967296"),
        ("--keepalive-time-ms", "0"),
        ("--buffer-events", "0"),
        ("--buffer-bytes", "-5"),
        ("--log-level", "loud"),
        ("--tls-cert", "/nonexistent/cert.pem"),
        ("--max-sessions", "0"),
        ("--max-sessions", "many"),
        ("--max-runs", "-1"),
        ("--max-runs", "1.5"),
        ("--max-streams-per-session", "0"),
        ("--max-loop-busy", "-1"),
        ("--max-loop-busy", "101"),
        ("--max-approval-wait", "0"),
        ("--max-approval-wait", "-3"),
        ("--max-approval-wait", "inf"),
        ("--max-approval-wait", "nan"),
    ],
)
def test_bad_values_are_usage_errors_naming_the_flag(tmp_path: Path, flag: str, value: str) -> None:
    done = serve("--data-dir", str(tmp_path / "data"), f"{flag}={value}")
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"argument {flag}" in done.stderr, done.stderr
    assert "ready" not in done.stdout
    assert "Traceback" not in done.stderr


def test_a_data_dir_that_is_a_file_or_under_one_is_refused(tmp_path: Path) -> None:
    afile = tmp_path / "passwd"
    afile.write_text("root:x:0:0\n")
    for bad in (afile, afile / "sub", tmp_path / "data"):
        if bad.name == "data":
            (bad / "traces").parent.mkdir()
            (bad / "traces").write_text("not a dir")
        done = serve("--data-dir", str(bad))
        assert done.returncode == 2, done.stdout + done.stderr
        assert "argument --data-dir" in done.stderr and str(bad) in done.stderr
        assert "ready" not in done.stdout


def test_a_read_only_data_dir_is_refused(tmp_path: Path) -> None:
    mountpoint = tmp_path / "ro"
    mountpoint.mkdir()
    mount = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(mountpoint)],
        capture_output=True,
        text=True,
    )
    if mount.returncode != 0:
        if os.environ.get("CI") or os.environ.get("OMNI_REQUIRE_TOOLCHAINS"):
            pytest.fail(f"cannot mount a tmpfs: {mount.stderr}")
        pytest.skip(f"cannot mount a tmpfs: {mount.stderr}")
    try:
        done = serve("--data-dir", str(mountpoint))
        assert done.returncode == 2, done.stdout + done.stderr
        assert "argument --data-dir" in done.stderr and "not writable" in done.stderr
    finally:
        subprocess.run(["umount", "-l", str(mountpoint)], check=False)
