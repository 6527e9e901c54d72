"""Tokens stay out of the logs (end to end, through serve), and out of ps with
--auth-token-file."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote, quote_plus, unquote_plus

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from omni_grpc.observability.logs import REDACTED as MASK
from omni_grpc.observability.logs import Redactor

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


# A token with characters a URL must encode, so each spelling differs.
ODD_TOKEN = "s3cr3t/T0k+en~&x=1?y#z:@!"


def _spellings(token: str) -> dict[str, str]:
    """Every way a client may write ``token`` into a URL."""
    quoted = quote(token, safe="")
    return {
        "quoted": quoted,
        "lower-hex": re.sub(r"%[0-9A-F]{2}", lambda m: m.group(0).lower(), quoted),
        "plus": quote_plus(token, safe=""),
        "every-byte": "".join(f"%{b:02X}" for b in token.encode()),
        "twice": quote(quoted, safe=""),
        "half": token[:8].replace("/", "%2F") + quote(token[8:], safe=""),
    }


def _decoded(text: str) -> str:
    """``text`` with every percent or plus encoding undone (twice over)."""
    for _ in range(3):
        text = unquote_plus(text)
    return text


def test_every_spelling_of_the_token_in_a_url_is_redacted(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(ODD_TOKEN + "\n")
    cmd = [sys.executable, "-m", "omni_grpc", "serve", "--grpc-port", "0", "--http-port", "0"]
    cmd += ["--data-dir", str(tmp_path / "data"), "--log-level", "info"]
    cmd += ["--auth-token-file", str(token_file)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sent = []
    try:
        assert proc.stdout is not None
        url = ""
        for line in proc.stdout:
            if "HTTP/SSE on " in line:
                url = line.split(" on ", 1)[1].split("/ ", 1)[0]
            if line.strip() == "omni-grpc ready":
                break
        with httpx.Client(base_url=url) as http:
            auth = {"authorization": f"Bearer {ODD_TOKEN}"}
            for name, spelled in _spellings(ODD_TOKEN).items():
                for target in (
                    f"/api/sessions?access_token={spelled}",
                    f"/api/sessions?api_key=x&tok={spelled}",
                    f"/api/sessions/{spelled}",
                    f"/api/sessions/{spelled}/stream?after={spelled}",
                    f"/nowhere/{spelled}?q={spelled}#frag",
                ):
                    # Sent as written: httpx would otherwise normalise the escapes.
                    request = http.build_request("GET", url + target, headers=auth)
                    request.url = httpx.URL(url + target)
                    reply = http.send(request)
                    assert reply.status_code < 500, (name, target, reply.status_code)
                    sent.append(target)
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=20)
    logs = out + err
    assert sent and logs.count("GET /") >= len(sent), logs[-2000:]  # the access lines are there
    assert ODD_TOKEN not in logs
    assert ODD_TOKEN not in _decoded(logs), [
        line for line in logs.splitlines() if ODD_TOKEN in _decoded(line)
    ][:5]
    for spelled in _spellings(ODD_TOKEN).values():
        assert spelled not in logs


@given(token=st.text(min_size=6, max_size=40).filter(lambda t: t.strip() == t))
def test_the_redactor_removes_any_url_spelling_of_a_secret(token: str) -> None:
    redact = Redactor([token])
    for spelled in _spellings(token).values():
        line = f'127.0.0.1:5 - "GET /api/sessions/{spelled}?x={spelled} HTTP/1.1" 200'
        out = redact(line)
        assert token not in _decoded(out), (spelled, out)
