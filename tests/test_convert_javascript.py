"""Lines written by real JavaScript (node's JSON.stringify) survive byte for
byte. This also pins our own JavaScript-number writer to node's."""

from __future__ import annotations

import os
import random
import shutil
import struct
import subprocess
from pathlib import Path

import orjson
import pytest

from omni_grpc.convert import parse_message, serialize_message
from omni_grpc.convert._fastpath import json_text
from omni_grpc.convert._jsontext import js_number
from omni_grpc.convert._shape import has_hints
from omni_grpc_proto.omni.v1 import omni_pb2

HERE = Path(__file__).parent
NODE = shutil.which("node")
needs_node = pytest.mark.skipif(
    NODE is None and not os.environ.get("OMNI_REQUIRE_TOOLCHAINS"),
    reason="node is not installed",
)


def corpus_text() -> bytes:
    lines = []
    for path in sorted((HERE / "conformance").glob("*.jsonl")):
        for line in path.read_bytes().split(b"\n"):
            try:
                parse_message(line)
            except ValueError:
                continue
            lines.append(line)
    return b"\n".join(lines) + b"\n"


@needs_node
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_javascript_written_lines_round_trip(seed: int) -> None:
    assert NODE is not None
    result = subprocess.run(
        [NODE, str(HERE / "js" / "mutate_corpus.mjs"), str(seed), "1500"],
        input=corpus_text(),
        capture_output=True,
        check=True,
        timeout=60,
    )
    lines = result.stdout.split(b"\n")[:-1]
    assert len(lines) == 1500
    shaped = 0
    for number, line in enumerate(lines, 1):
        message = parse_message(line, line=number)
        shaped += has_hints(message)
        assert serialize_message(message) == line, f"line {number}"
        again = omni_pb2.OmniMessage.FromString(message.SerializeToString(deterministic=True))
        assert serialize_message(again) == line, f"line {number} after the wire"
    assert shaped > 100  # the mutations really exercised the hints


@needs_node
def test_number_text_matches_node() -> None:
    assert NODE is not None
    rng = random.Random(7)
    values = [struct.unpack("<d", rng.randbytes(8))[0] for _ in range(3000)]
    values = [v for v in values if v == v and abs(v) != float("inf")]
    values += [0.1 * k for k in range(50)] + [10.0**e for e in range(-10, 25)]
    values += [2.0**53, 2.0**53 + 2, 2.0**64, 5e-324, -1.5e-7, 123456789012345680000.0]
    script = (
        "const xs=require('fs').readFileSync(0,'utf8').trim().split('\\n');"
        "console.log(xs.map(x=>JSON.stringify(Number(x))).join('\\n'))"
    )
    result = subprocess.run(
        [NODE, "-e", script],
        input="\n".join(repr(v) for v in values).encode(),
        capture_output=True,
        check=True,
        timeout=60,
    )
    expected = result.stdout.decode().split()
    assert [js_number(v) for v in values] == expected


@needs_node
def test_schema_text_from_orjson_matches_node() -> None:
    """The fast path keeps orjson's own text of a JSON Schema it parsed when
    no number in it is in exponent form: that text must be JavaScript's."""
    assert NODE is not None
    rng = random.Random(11)
    values = [struct.unpack("<d", rng.randbytes(8))[0] for _ in range(3000)]
    values = [v for v in values if v == v and abs(v) != float("inf")]
    values += [rng.random() * 10.0 ** rng.randint(-9, 22) for _ in range(3000)]
    values += [0.1 * k for k in range(50)] + [10.0**e for e in range(-10, 25)]
    script = (
        "const xs=require('fs').readFileSync(0,'utf8').trim().split('\\n');"
        "console.log(JSON.stringify({minimum:xs.map(Number)}))"
    )
    result = subprocess.run(
        [NODE, "-e", script],
        input="\n".join(repr(v) for v in values).encode(),
        capture_output=True,
        check=True,
        timeout=60,
    )
    written = result.stdout.strip()
    assert json_text(orjson.loads(written)) == written.decode()
    for item in orjson.loads(written)["minimum"]:
        single = orjson.dumps({"minimum": item})
        expected = b'{"minimum":' + js_number(float(item)).encode() + b"}"
        if type(item) is float:
            assert json_text({"minimum": item}).encode() == expected, single
