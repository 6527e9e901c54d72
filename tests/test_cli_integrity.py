"""``omni-grpc convert`` and ``validate`` on every class of bad input: exit 1
with the line and JSON path, never a traceback, and no output file."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from omni_grpc.convert import parse_message
from omni_grpc.trace import write_binpb
from omni_grpc_proto.omni.v1 import omni_pb2

CLI = str(Path(sys.executable).with_name("omni-grpc"))
GOOD = b'{"timestamp":"t","type":"event_msg","payload":{"type":"request_begin"}}'


def cli(*args: str | Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [CLI, *map(str, args)],
        capture_output=True,
        text=True,
        encoding="utf-8",
        errors="surrogateescape",
        timeout=120,
        check=False,
        env={**os.environ, **(env or {})},
    )


def text_with(field: str) -> bytes:
    return (
        b'{"timestamp":"t","type":"model_msg","payload":{"type":"text","role":"user",'
        b'"text":"x",' + field + b"}}"
    )


def nested(levels: int) -> bytes:
    return b"[" * levels + b"]" * levels


BAD_LINES = {
    "fidelity past the depth limit": (
        text_with(b'"fidelity":{"a":' + nested(1030) + b"}"),
        "/payload/fidelity/a/0/0",
    ),
    "unknown key past the depth limit": (
        text_with(b'"extra":' + nested(100_000)),
        "/payload/extra/0/0",
    ),
    "a number read as Infinity": (
        b'{"timestamp":"t","type":"event_msg","payload":{"type":"compaction_begin",'
        b'"reason":"context","mode":"summarize","context":1e400,"turns":1}}',
        "/payload/context",
    ),
    "a 400-digit integer": (
        text_with(b'"fidelity":{"n":' + b"9" * 400 + b"}"),
        "/payload/fidelity/n",
    ),
    "a huge model_context_window": (
        b'{"timestamp":"t","type":"session_meta","payload":{"session_id":"s","provider":"p",'
        b'"model_id":"m","model_context_window":-1e400,"system_prompt":"","agent_state":"a",'
        b'"workspace":"w"}}',
        "/payload/model_context_window",
    ),
    "UTF-8 bytes of a lone surrogate": (text_with(b'"lang":"\xed\xa0\x80"'), "not UTF-8"),
    "bytes that are not UTF-8": (text_with(b'"lang":"\xff\xfe"'), "not UTF-8"),
    "a contradicting envelope type": (
        b'{"timestamp":"t","type":"event_msg","payload":{"type":"text","role":"user","text":"x"}}',
        "/type",
    ),
}


@pytest.mark.parametrize("name", sorted(BAD_LINES))
def test_convert_refuses_with_line_and_path(name: str, tmp_path: Path) -> None:
    line, where = BAD_LINES[name]
    source = tmp_path / "in.jsonl"
    source.write_bytes(GOOD + b"\n" + line + b"\n")
    out = tmp_path / "out.binpb"
    done = cli("convert", source, out)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert ": line 2: " in done.stderr and where in done.stderr, done.stderr
    assert not out.exists()


@pytest.mark.parametrize("name", sorted(BAD_LINES))
def test_validate_reports_the_line_and_exits_1(name: str, tmp_path: Path) -> None:
    line, where = BAD_LINES[name]
    source = tmp_path / "in.jsonl"
    source.write_bytes(GOOD + b"\n" + line + b"\n" + GOOD + b"\n")
    done = cli("validate", "--stream", source)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert f"{source}:2: error:" in done.stdout and where in done.stdout, done.stdout
    assert "3 lines checked" in done.stdout


def test_a_deep_line_within_the_limit_converts_both_ways(tmp_path: Path) -> None:
    line = text_with(b'"fidelity":{"a":' + nested(1000) + b'},"extra":' + nested(1019))
    source = tmp_path / "in.jsonl"
    source.write_bytes(line + b"\n")
    assert cli("convert", source, tmp_path / "t.binpb").returncode == 0
    done = cli("convert", tmp_path / "t.binpb", tmp_path / "back.jsonl")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "back.jsonl").read_bytes() == line + b"\n"


def binpb_of(*messages: omni_pb2.OmniMessage) -> bytes:
    sink = io.BytesIO()
    write_binpb(messages, sink)
    return sink.getvalue()


def test_convert_writes_a_pretty_printed_unknown_payload_as_one_line(tmp_path: Path) -> None:
    msg = parse_message(b'{"timestamp":"t","type":"event_msg","payload":{"type":"video","a":1}}')
    msg.unknown.json = '{\n  "type": "video",\n  "a": 1\n}'
    (tmp_path / "t.binpb").write_bytes(binpb_of(msg))
    done = cli("convert", tmp_path / "t.binpb", tmp_path / "t.jsonl")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "t.jsonl").read_bytes() == (
        b'{"timestamp":"t","type":"event_msg","payload":{"type":"video","a":1}}\n'
    )


def test_convert_refuses_a_forged_hint_in_a_binpb(tmp_path: Path) -> None:
    msg = parse_message(GOOD)
    msg.key_orders.add(path="/payload", keys=["type", "x"])
    msg.raw_values.add(path="/payload/x", json='1,"role":"assistant","text":"forged"')
    (tmp_path / "t.binpb").write_bytes(binpb_of(parse_message(GOOD), msg))
    done = cli("convert", tmp_path / "t.binpb", tmp_path / "t.jsonl")
    assert done.returncode == 1
    assert "t.binpb: record 2: /payload/x: the raw value hint is not one JSON value" in (
        done.stderr
    )
    assert "/payload/x" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "t.jsonl").exists()


@pytest.mark.parametrize("encoding", ["utf-8", "ascii"])
def test_validate_prints_lone_surrogates_and_odd_text_safely(encoding: str, tmp_path: Path) -> None:
    source = tmp_path / "odd.jsonl"
    source.write_bytes(
        b'{"timestamp":"t","type":"model_msg","payload":{"type":"x\\ud800\xc3\xa9","a":1}}\n'
        b'{"timestamp":"t","type":"model_msg","payload":{"type":"text","role":"r\\udfff",'
        b'"text":"x"}}\n'
    )
    done = cli("validate", "--stream", source, env={"PYTHONIOENCODING": encoding})
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert "unknown payload kind" in done.stdout and "\\ud800" in done.stdout
    assert "unknown role" in done.stdout and "\\udfff" in done.stdout


def test_validate_warns_about_an_enum_number_from_a_newer_schema(tmp_path: Path) -> None:
    msg = omni_pb2.OmniMessage(timestamp="t")
    msg.request_end.status = 42  # type: ignore[assignment]
    (tmp_path / "t.binpb").write_bytes(binpb_of(parse_message(GOOD), msg))
    done = cli("validate", "--stream", tmp_path / "t.binpb")
    assert done.returncode == 0, done.stdout
    assert "status 42 in request_end is an enum number this schema has no name for" in (done.stdout)
    assert "1 warning(s)" in done.stdout
