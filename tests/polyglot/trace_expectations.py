"""What a language's ``trace`` command must print for a trace, computed from
the JSON lines with the Python codec, and a parser for what it did print.

Each printed line is ``#N TIMESTAMP KIND [key=JSON]...`` where KIND is the
payload's proto field name and the keys are text, name, type and fidelity.
Fidelity is its Struct view (lone surrogates as U+FFFD, nothing below the
view's depth). Numbers are compared as doubles (Struct holds doubles in every language, and
Go, Java and JavaScript spell them differently) and maps regardless of order.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from omni_grpc.convert import parse_message
from omni_grpc.convert._fields import struct_view
from omni_grpc.convert._jsontext import loads

_DECODER = json.JSONDecoder()


def as_doubles(value: Any) -> Any:
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, list):
        return [as_doubles(v) for v in value]
    return {k: as_doubles(v) for k, v in value.items()}


def convert_with_cli(source: Path, tmp_path: Path) -> Path:
    """Writes ``source`` (JSONL) as .binpb with ``omni-grpc convert``."""
    out = tmp_path / (source.stem + ".binpb")
    subprocess.run(
        [sys.executable, "-m", "omni_grpc", "convert", str(source), str(out)],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return out


def expected_line(line: str) -> dict[str, Any]:
    arm = parse_message(line).WhichOneof("payload")
    obj = loads(line)  # lines may nest deeper than the stdlib parser goes
    payload = obj.get("payload", {})
    fields: dict[str, Any] = {"timestamp": obj.get("timestamp", ""), "kind": arm}
    if arm == "text":
        fields["text"] = payload["text"]
    elif arm == "tool_call":
        fields["name"] = payload["name"]
    elif arm == "unknown":
        fields["type"] = payload.get("type", "")
    if arm in {"text", "tool_call", "thinking", "inline_data", "inline_thinking"} and isinstance(
        payload.get("fidelity"), dict
    ):
        # The Struct view: deeper than its documented depth, values read as null.
        fields["fidelity"] = as_doubles(struct_view(payload["fidelity"]))
    return fields


def expected_trace_lines(source: Path | list[str]) -> list[dict[str, Any]]:
    lines = source.read_text().splitlines() if isinstance(source, Path) else source
    return [expected_line(line) for line in lines if line.strip()]


def parse_trace_lines(stdout: str) -> list[dict[str, Any]]:
    parsed = []
    for n, line in enumerate(stdout.splitlines(), 1):
        number, timestamp, kind, *rest = line.split(" ", 3)
        assert number == f"#{n}", f"line {n}: {line!r}"
        fields: dict[str, Any] = {"timestamp": timestamp, "kind": kind}
        text = rest[0] if rest else ""
        while text:
            key, _, text = text.partition("=")
            value, end = _DECODER.raw_decode(text)
            fields[key] = as_doubles(value) if key == "fidelity" else value
            text = text[end:].lstrip(" ")
        parsed.append(fields)
    return parsed
