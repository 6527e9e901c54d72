"""What a default ``.binpb`` looks like to readers built from the generated
stubs alone (issue 28): Go, Java and Node programs in ``stubonly/`` that read
records the standard way (a varint length and ``proto.Unmarshal``,
``parseDelimitedFrom``, ``sizeDelimitedDecodeStream``) and know nothing of
this project's framing or of ``base64_values``.

* A record of tool definitions stored compressed in the marked form stops
  such a reader with a parse error at that record: it never reads it as an
  empty or short message, and every record before it reads whole.
* A record whose fidelity base64 is stored as bytes reads: the Struct holds
  ``""`` at the hint's path and the standard base64 of ``data`` is exactly
  the text the JSONL had there (what docs/traces.md tells readers to do).
* ``convert --plain`` gives a file such a reader reads whole, with no hint.
"""

from __future__ import annotations

import base64
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from google.protobuf.internal.decoder import _DecodeVarint
from google.protobuf.message import DecodeError

from omni_grpc.convert import parse_message
from omni_grpc.convert._base64 import PACK_FROM
from omni_grpc.convert._jsontext import dump_value, loads
from omni_grpc.trace.binpb import MARK
from omni_grpc_proto.omni.v1.omni_pb2 import OmniMessage
from polyglot.polyglot_builds import build_stubonly_go, build_stubonly_java, build_stubonly_node

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))
from sizes import style_lines  # benchmarks/sizes.py: its provider-style traces

SECRET = base64.b64encode(bytes(range(256)) * 2).decode()


def crafted() -> bytes:
    """Base64 at a nested path whose key needs JSON Pointer escapes, in a
    list, beside strings that are not canonical and stay text."""
    fidelity = {
        "a/b~c": [{"sig": SECRET}, "x"],
        "url_safe": SECRET.replace("+", "-").replace("/", "_"),
        "short": SECRET[:64],
        "top": SECRET[4:],
    }
    payload = {"type": "text", "role": "assistant", "text": "t", "fidelity": fidelity}
    msg = {"timestamp": "2026-01-02T03:04:05.000Z", "type": "model_msg", "payload": payload}
    return dump_value(msg).encode()


def trace_lines() -> list[bytes]:
    """OpenAI- and Anthropic-style turns, then a schema-heavy session (its
    tool list is the marked record), then more turns."""
    heavy = style_lines("schema-heavy", 1, 1)
    return [
        *style_lines("openai", 2, 1),
        crafted(),
        *style_lines("anthropic", 1, 1),
        *heavy,
        *style_lines("openai-reasoning", 2, 2),
    ]


def convert(lines: list[bytes], tmp_path: Path, *flags: str) -> bytes:
    """The .binpb ``omni-grpc convert`` writes (the native batch path)."""
    source, out = tmp_path / "in.jsonl", tmp_path / "out.binpb"
    source.write_bytes(b"".join(line + b"\n" for line in lines))
    subprocess.run(
        [sys.executable, "-m", "omni_grpc", "convert", *flags, str(source), str(out)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return out.read_bytes()


def frames(data: bytes) -> list[bytes]:
    out, pos = [], 0
    while pos < len(data):
        length, pos = _DecodeVarint(data, pos)
        out.append(data[pos : pos + length])
        pos += length
    return out


@pytest.fixture(params=["go", "java", "node"])
def reader(request: pytest.FixtureRequest) -> list[str]:
    if request.param == "go":
        return [str(build_stubonly_go())]
    if request.param == "java":
        return build_stubonly_java()
    return build_stubonly_node()


def run(reader: list[str], data: bytes) -> tuple[int, list[tuple[str, ...]], str]:
    done = subprocess.run(reader, input=data, capture_output=True, timeout=120, check=False)
    rows = [tuple(line.split("\t")) for line in done.stdout.decode().splitlines()]
    return done.returncode, rows, done.stderr.decode()


def arm(line: bytes) -> str:
    return parse_message(line).WhichOneof("payload") or "none"


def pointer(obj: Any, path: str) -> Any:
    for part in path.lstrip("/").split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        obj = obj[int(part)] if isinstance(obj, list) else obj[part]
    return obj


def long_base64(value: Any, path: str) -> set[str]:
    """The JSON Pointers of every canonical base64 string of PACK_FROM
    characters or more under ``value``."""
    if isinstance(value, str):
        try:
            ok = (
                len(value) >= PACK_FROM
                and base64.b64encode(base64.b64decode(value, validate=True)).decode() == value
            )
        except ValueError:
            ok = False
        return {path} if ok else set()
    if isinstance(value, dict):
        items = [(k.replace("~", "~0").replace("/", "~1"), v) for k, v in value.items()]
    elif isinstance(value, list):
        items = [(str(n), v) for n, v in enumerate(value)]
    else:
        return set()
    return set().union(*(long_base64(v, f"{path}/{k}") for k, v in items))


def test_a_stub_only_reader_stops_loudly_at_a_marked_record(
    reader: list[str], tmp_path: Path
) -> None:
    lines = trace_lines()
    data = convert(lines, tmp_path)
    bodies = frames(data)
    assert len(bodies) == len(lines)
    marked = [n for n, body in enumerate(bodies) if body[:1] == MARK]
    assert marked == [n for n, line in enumerate(lines) if arm(line) == "tool_list_ready"]
    first = marked[0]
    # The stubs' own parser refuses it too (upb, here).
    with pytest.raises(DecodeError):
        OmniMessage.FromString(bodies[first])

    code, rows, stderr = run(reader, data)
    assert code == 3, (code, stderr)
    assert stderr.startswith(f"record {first + 1}: "), stderr
    # Every record before it reads whole, and nothing reads as the marked one.
    got = [(int(r[1]), r[2]) for r in rows if r[0] == "record"]
    assert got == [(n + 1, arm(line)) for n, line in enumerate(lines[:first])]


def test_a_stub_only_reader_reads_base64_as_bytes(reader: list[str], tmp_path: Path) -> None:
    lines = [line for line in trace_lines() if arm(line) != "tool_list_ready"]
    data = convert(lines, tmp_path)
    assert not any(body[:1] == MARK for body in frames(data))

    code, rows, stderr = run(reader, data)
    assert code == 0, stderr
    records = [(int(r[1]), r[2]) for r in rows if r[0] == "record"]
    assert records == [(n + 1, arm(line)) for n, line in enumerate(lines)]
    hints: dict[int, dict[str, tuple[str, str]]] = {}
    for _, n, path, seen, text in (r for r in rows if r[0] == "b64"):
        hints.setdefault(int(n), {})[path] = (seen, text)
    for n, line in enumerate(lines, 1):
        obj = loads(line)
        fidelity = obj["payload"].get("fidelity")
        want = long_base64(fidelity, "/payload/fidelity") if isinstance(fidelity, dict) else set()
        assert set(hints.get(n, {})) == want, n
        for path, (seen, text) in hints.get(n, {}).items():
            # The Struct holds "" there; the standard encoder gives the text.
            assert seen == "=", (n, path, seen)
            assert text == pointer(obj, path), (n, path)
    # The crafted line's escaped, nested path, and both provider styles.
    assert "/payload/fidelity/a~1b~0c/0/sig" in set().union(*map(set, hints.values()))
    assert sum(len(h) for h in hints.values()) >= 6


def test_plain_is_read_whole_by_a_stub_only_reader(reader: list[str], tmp_path: Path) -> None:
    lines = trace_lines()
    data = convert(lines, tmp_path, "--plain")
    code, rows, stderr = run(reader, data)
    assert code == 0, stderr
    assert rows == [("record", str(n + 1), arm(line)) for n, line in enumerate(lines)]
