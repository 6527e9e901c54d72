"""Tokens stay out of the logs (end to end, through serve), and out of ps with
--auth-token-file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from omni_grpc.observability.logs import REDACTED as MASK

TOKEN = "s3cr3t-T0ken_value"


@pytest.mark.parametrize("how", ["file", "flag"])
def test_serve_logs_no_token_at_info(tmp_path: Path, how: str) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    source = ["--auth-token-file", str(token_file)] if how == "file" else ["--auth-token", TOKEN]
    cmd = [sys.executable, "-m", "omni_grpc", "serve", "--grpc-port", "0", "--http-port", "0"]
    cmd += ["--data-dir", str(tmp_path / "data"), "--log-level", "info", *source]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        url = ""
        for line in proc.stdout:
            if "HTTP/SSE on " in line:
                url = line.split(" on ", 1)[1].split("/ ", 1)[0]
            if line.strip() == "omni-grpc ready":
                break
        with httpx.Client(base_url=url) as http:
            assert http.get(f"/api/sessions?access_token={TOKEN}").status_code == 200
            assert (
                http.get("/api/sessions", headers={"authorization": f"Bearer {TOKEN}"}).status_code
                == 200
            )
            assert http.get("/api/sessions?access_token=wrong-guess").status_code == 401
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=20)
    logs = out + err
    assert "GET /api/sessions?access_token=" + MASK in logs, logs  # the line is there...
    assert TOKEN not in logs and "wrong-guess" not in logs  # ...without the token
    if how == "file":
        assert TOKEN not in " ".join(cmd)


def test_a_token_file_must_hold_one_token(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.write_text("\n")
    done = subprocess.run(
        [sys.executable, "-m", "omni_grpc", "serve", "--grpc-port", "0", "--http-port", "0",
         "--data-dir", str(tmp_path / "d"), "--auth-token-file", str(empty)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2 and "--auth-token-file" in done.stderr
