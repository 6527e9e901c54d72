"""``omni-grpc validate`` run as a real process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from omni_grpc import protocol as p
from omni_grpc.convert import message_from_dict
from omni_grpc.trace import write_binpb

CORPUS = Path(__file__).parent / "conformance"
CLI = str(Path(sys.executable).with_name("omni-grpc"))


def cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [CLI, *map(str, args)], capture_output=True, text=True, timeout=120, check=False
    )


def test_clean_trace_exits_0() -> None:
    done = cli("validate", CORPUS / "trace_basic_tool_turn_001.jsonl")
    assert done.returncode == 0
    assert "15 lines checked as a trace: 0 error(s), 0 warning(s)" in done.stdout


def test_violations_name_lines_and_exit_1(tmp_path: Path) -> None:
    lines = [
        p.partial_text("start"),
        p.partial_text("delta", "hello"),
        p.partial_text("stop"),
        p.assistant_text("hullo"),
        p.tool_call_output("x", "ghost"),
    ]
    path = tmp_path / "bad.jsonl"
    path.write_text("".join(json.dumps(m) + "\n" for m in lines))
    done = cli("validate", path)
    assert done.returncode == 1
    assert f"{path}:4: error: text text differs" in done.stdout
    assert f"{path}:5: error: tool_call_output for unknown call 'ghost'" in done.stdout


def test_malformed_lines_are_errors_but_checking_goes_on() -> None:
    done = cli("validate", CORPUS / "trace_torn_tail_healed_001.jsonl")
    assert done.returncode == 1
    assert ":6: error: malformed line" in done.stdout
    # All 7 lines were read; the malformed one counts as checked too.
    assert "7 lines checked as a trace: 1 error(s)" in done.stdout


def test_diagnostics_come_in_line_order(tmp_path: Path) -> None:
    path = tmp_path / "mixed.jsonl"
    lines = [
        json.dumps(p.tool_call("ls", "{}", "c1")),  # never answered: known only at the end
        "{not json",  # known when read
        json.dumps(p.assistant_text("done")),
    ]
    path.write_text("\n".join(lines) + "\n")
    done = cli("validate", "--stream", path)
    assert done.returncode == 1
    found = [": ".join(line.split(": ")[:2]) for line in done.stdout.splitlines()]
    assert found == [
        f"{path}:1: warning",
        f"{path}:2: error",
        f"{path}: 3 lines checked as a stream",
    ]


def test_warnings_alone_exit_0(tmp_path: Path) -> None:
    path = tmp_path / "future.ndjson"
    path.write_text('{"timestamp":"t","type":"event_msg","payload":{"type":"future"}}\n')
    done = cli("validate", path)
    assert done.returncode == 0
    assert ":1: warning: unknown payload kind 'future'" in done.stdout
    assert cli("validate", "--quiet", path).stdout.count("warning:") == 0


def test_binpb_input(tmp_path: Path) -> None:
    path = tmp_path / "s.binpb"
    with path.open("wb") as f:
        write_binpb([message_from_dict(p.request_begin(timestamp="t"))], f)
    done = cli("validate", path)
    assert done.returncode == 0  # an open request is only a warning
    assert "1 record checked as a stream: 0 error(s), 1 warning(s)" in done.stdout
    path.write_bytes(path.read_bytes()[:-1])
    done = cli("validate", path)
    assert done.returncode == 1 and "record 1 at byte offset 0: truncated frame" in done.stdout


def test_usage_errors_exit_2(tmp_path: Path) -> None:
    assert cli("validate", tmp_path / "missing.jsonl").returncode == 2
    (tmp_path / "x.txt").write_text("")
    assert cli("validate", tmp_path / "x.txt").returncode == 2
    assert cli("validate").returncode == 2


@pytest.mark.parametrize(
    ("tail", "wording"),
    [
        # Cut off mid-write: the data ends inside the line.
        (b'{"payload":{"type":"te', "torn last line (no newline: cut off mid-write)"),
        (b"{not json", "torn last line (no newline: cut off mid-write)"),
        # Written whole, newline and all: simply malformed, not torn.
        (b"{not json\n", "malformed last line"),
        (b"{not json\r\n", "malformed last line"),
        (b"{not json\n\n  \n", "malformed last line"),
        (b'["not", "an object"]\n', "malformed last line"),
    ],
)
def test_a_bad_last_line_is_torn_only_without_its_newline(
    tmp_path: Path, tail: bytes, wording: str
) -> None:
    path = tmp_path / "t.jsonl"
    good = json.dumps(p.assistant_text("fine")).encode()
    path.write_bytes(good + b"\n" + tail)
    done = cli("validate", path)
    assert done.returncode == 1
    assert f"{path}:2: error: {wording}: " in done.stdout, done.stdout
    converted = cli("convert", "--tolerant", path, tmp_path / "out.binpb")
    assert converted.returncode == 0
    expected = "torn last line ignored" if "torn" in wording else "malformed last line skipped"
    assert f"line 2: {expected}" in converted.stderr
