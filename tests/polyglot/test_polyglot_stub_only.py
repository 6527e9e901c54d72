"""What a default ``.binpb`` looks like to readers built from the generated
stubs alone (issue 28): Go, Java and Node programs in ``stubonly/`` that read
records the standard way (a varint length and ``proto.Unmarshal``,
``parseDelimitedFrom``, ``sizeDelimitedDecodeStream``) and know nothing of
this project's framing or of ``base64_values``.

* A record of tool definitions stored compressed in the marked form stops
  such a reader with a parse error at that record: it never reads it as an
  empty or short message, and every record before it reads whole.
* A record whose base64 is stored as bytes reads: wherever the JSONL had a
  long canonical base64 string (in fidelity, a data URL, inline data; either
  alphabet) the record holds a placeholder, and the entry it names gives
  exactly that text (prefix + base64 of ``data``, what docs/traces.md tells
  readers to do). A placeholder naming no entry, or another record's
  bytes, stops the reader.
* ``convert --plain`` gives a file such a reader reads whole, with no hint.
"""

from __future__ import annotations

import base64
import contextlib
import io
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from google.protobuf.internal.decoder import _DecodeVarint
from google.protobuf.message import DecodeError

from omni_grpc.convert import ConversionError, parse_message
from omni_grpc.convert._base64 import PACK_FROM
from omni_grpc.convert._jsontext import dump_value, loads
from omni_grpc.trace import read_binpb
from omni_grpc.trace.binpb import MARK
from omni_grpc_proto.omni.v1.omni_pb2 import OmniMessage
from polyglot.polyglot_builds import build_stubonly_go, build_stubonly_java, build_stubonly_node

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))
from sizes import style_lines  # benchmarks/sizes.py: its provider-style traces

SECRET = base64.b64encode(bytes(range(256)) * 2).decode()


def crafted() -> bytes:
    """Base64 at a nested path whose key needs JSON Pointer escapes, in a
    list, in the URL-safe alphabet, beside strings that are not canonical
    and stay text."""
    fidelity = {
        "a/b~c": [{"sig": SECRET}, "x"],
        "url_safe": SECRET.replace("+", "-").replace("/", "_"),
        "short": SECRET[:64],
        "top": SECRET[4:],
        "unpadded": SECRET.rstrip("=")[:-2],
    }
    payload = {"type": "text", "role": "assistant", "text": "t", "fidelity": fidelity}
    msg = {"timestamp": "2026-01-02T03:04:05.000Z", "type": "model_msg", "payload": payload}
    return dump_value(msg).encode()


def images() -> list[bytes]:
    """Base64 in typed fields: a data URL, inline data, tool output images."""
    t = '{"timestamp":"2026-01-02T03:04:05.000Z","type":"model_msg","payload":'
    url = f"data:image/png;base64,{SECRET}"
    return [
        f'{t}{{"type":"image_url","role":"user","image_url":"{url}"}}}}'.encode(),
        f'{t}{{"type":"inline_data","role":"user","data":"{SECRET}","mime_type":"image/png"}}}}'.encode(),
        f'{t}{{"type":"tool_call_output","role":"user","output":"o","images":["x","{url}"],'
        f'"tool_call_id":"c"}}}}'.encode(),
    ]


def trace_lines() -> list[bytes]:
    """OpenAI- and Anthropic-style turns, then a schema-heavy session (its
    tool list is the marked record), then more turns."""
    heavy = style_lines("schema-heavy", 1, 1)
    return [
        *style_lines("openai", 2, 1),
        crafted(),
        *images(),
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
    """The JSON Pointers of every string of PACK_FROM characters or more
    under ``value`` that is canonical base64 in either alphabet, after an
    optional data-URL prefix (by the standard library's own codecs)."""
    if isinstance(value, str):
        prefix, _, body = (
            value.partition(";base64,") if value.startswith("data:") else ("", "", value)
        )
        ok = False
        for decode, encode in (
            (lambda t: base64.b64decode(t, validate=True), base64.b64encode),
            (
                lambda t: base64.b64decode(t.translate(URL), validate=True),
                base64.urlsafe_b64encode,
            ),
        ):
            with contextlib.suppress(ValueError):
                ok = ok or encode(decode(body)).decode() == body
        return {path} if ok and len(value) >= PACK_FROM and "," not in prefix else set()
    if isinstance(value, dict):
        items = [(k.replace("~", "~0").replace("/", "~1"), v) for k, v in value.items()]
    elif isinstance(value, list):
        items = [(str(n), v) for n, v in enumerate(value)]
    else:
        return set()
    return set().union(*(long_base64(v, f"{path}/{k}") for k, v in items))


URL = str.maketrans("-_", "+/")
TYPED = ("image_url", "data", "images")


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
    hints: dict[int, dict[str, str]] = {}
    for _, n, path, text in (r for r in rows if r[0] == "b64"):
        hints.setdefault(int(n), {})[path] = text
    for n, line in enumerate(lines, 1):
        payload = loads(line)["payload"]
        want = set().union(
            *(
                long_base64(payload[k], f"/payload/{k}")
                for k in (*TYPED, "fidelity")
                if k in payload
            )
        )
        assert set(hints.get(n, {})) == want, n
        for path, text in hints.get(n, {}).items():
            assert text == pointer({"payload": payload}, path), (n, path)
    found = set().union(*map(set, hints.values()))
    # The crafted line's escaped, nested path, and every kind of place.
    assert "/payload/fidelity/a~1b~0c/0/sig" in found
    assert {"/payload/fidelity/url_safe", "/payload/image_url", "/payload/images/1"} <= found
    assert "/payload/data" in found
    assert sum(len(h) for h in hints.values()) >= 10


@pytest.mark.parametrize(
    "damage", ["index", "crc", "malformed"], ids=["names-no-entry", "other-bytes", "malformed"]
)
def test_a_stub_only_reader_refuses_a_placeholder_that_is_not_its_records(
    reader: list[str], tmp_path: Path, damage: str
) -> None:
    """A placeholder an edit copied from another record, or damaged, stops
    the reader as it stops ours: never a wrong text."""
    (body,) = frames(convert([crafted()], tmp_path))
    msg = OmniMessage.FromString(body)
    held = msg.text.fidelity["top"]
    assert held.startswith("\x00base64:")
    index, crc = held[len("\x00base64:") :].split(":")
    msg.text.fidelity["top"] = {
        "index": f"\x00base64:{len(msg.base64_values)}:{crc}",
        "crc": f"\x00base64:{index}:{int(crc, 16) ^ 1:08x}",
        "malformed": "\x00base64:x",
    }[damage]
    data = msg.SerializeToString()
    data = _encode_varint(len(data)) + data
    code, _, stderr = run(reader, data)
    assert code == 4, (code, stderr)
    assert stderr.startswith("record 1 /payload/fidelity/top: "), stderr
    with pytest.raises(ConversionError, match="/payload/fidelity/top: a base64 placeholder"):
        list(read_binpb(io.BytesIO(data)))


def _encode_varint(value: int) -> bytes:
    from omni_grpc.trace.binpb import encode_varint

    return encode_varint(value)


def test_plain_is_read_whole_by_a_stub_only_reader(reader: list[str], tmp_path: Path) -> None:
    lines = trace_lines()
    data = convert(lines, tmp_path, "--plain")
    code, rows, stderr = run(reader, data)
    assert code == 0, stderr
    assert rows == [("record", str(n + 1), arm(line)) for n, line in enumerate(lines)]
