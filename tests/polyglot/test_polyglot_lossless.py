"""Losslessness across languages.

JSON lines (the whole conformance corpus plus crafted lines with multi-key
fidelity, awkward numbers, unknown payload kinds, unknown keys and keys out of
order, values nested 1,000 levels deep) go through the Python codec into a
delimited .binpb (large records stored compressed, as `omni-grpc convert`
writes them). The Go, Java and Node programs parse every record, with
their runtime's default decoding options, into their typed OmniMessage and serialize it
again; Python then writes JSON from what came back, which must be the input,
byte for byte. The same programs must also read the typed fields (kind, text,
fidelity as a map) correctly.
"""

from __future__ import annotations

import io
import subprocess
from pathlib import Path

import pytest
from google.protobuf.message import Message

from omni_grpc.convert import ConversionError, parse_message, serialize_message
from omni_grpc.convert._jsontext import loads
from omni_grpc.trace import read_binpb, write_binpb
from polyglot.trace_expectations import expected_trace_lines, parse_trace_lines

HERE = Path(__file__).parent
CORPUS = sorted((HERE.parent / "conformance").glob("*.jsonl"))


def is_json(line: str) -> bool:
    try:
        loads(line)  # the codec's parser: crafted lines nest past the stdlib's reach
    except ConversionError:
        return False
    return True


def corpus_lines() -> list[str]:
    """Every JSON line; the corpus's deliberately torn or elided lines (the
    torn-tail traces, the docs excerpt's "...") are not messages."""
    lines = []
    for path in [*CORPUS, HERE / "crafted_lossless.jsonl"]:
        lines += [line for line in path.read_text(encoding="utf-8").splitlines() if is_json(line)]
    return lines


@pytest.fixture(scope="module")
def lines() -> list[str]:
    found = corpus_lines()
    # The precondition: Python alone is lossless on every line.
    for n, line in enumerate(found, 1):
        assert serialize_message(parse_message(line, line=n)).decode() == line
    return found


@pytest.fixture(scope="module", params=["compress", "default"])
def binpb(request: pytest.FixtureRequest, lines: list[str]) -> bytes:
    """The file as ``convert --compress`` writes it (zlib_record), and as
    ``convert`` does by default (records of tool definitions marked and
    compressed); both store fidelity's long base64 as bytes."""
    sink = io.BytesIO()
    write_binpb((parse_message(line) for line in lines), sink, compress=request.param == "compress")
    return sink.getvalue()


def test_the_crafted_lines_reach_the_hard_cases(lines: list[str], binpb: bytes) -> None:
    arms = [parse_message(line).WhichOneof("payload") for line in lines]
    assert arms.count("unknown") >= 2
    assert len(lines) > 250
    # Records stored compressed (zlib_record or marked), plain, and with
    # base64 as bytes all reach the readers.
    from google.protobuf.internal.decoder import _DecodeVarint

    from omni_grpc.trace.binpb import MARK
    from omni_grpc_proto.omni.v1.omni_pb2 import OmniMessage

    stored, marked, base64ed, pos = [], 0, 0, 0
    while pos < len(binpb):
        length, pos = _DecodeVarint(binpb, pos)
        body = binpb[pos : pos + length]
        pos += length
        if body[:1] == MARK:
            marked += 1
            stored.append(True)
            continue
        record = OmniMessage.FromString(body)
        stored.append(bool(record.zlib_record))
        base64ed += bool(record.base64_values)
    assert len(stored) == len(lines)
    if marked:
        # records of tool definitions only (tool lists, legacy metas with tools)
        schemas = arms.count("tool_list_ready") + arms.count("session_meta")
        assert 1 <= sum(stored) == marked <= schemas, marked
        assert base64ed >= 1
    else:
        assert 10 <= sum(stored) < len(lines), sum(stored)


def test_round_trip_through_each_language_is_byte_identical(
    client: list[str], lines: list[str], binpb: bytes
) -> None:
    done = subprocess.run(
        [*client, "echo"], input=binpb, capture_output=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr.decode()
    records = read_binpb(io.BytesIO(done.stdout))
    back = [serialize_message(record.message).decode() for record in records]
    assert len(back) == len(lines)
    for n, (got, want) in enumerate(zip(back, lines, strict=True), 1):
        assert got == want, f"line {n} changed"


def test_each_language_reads_the_typed_fields(
    client: list[str], lines: list[str], binpb: bytes, tmp_path: Path
) -> None:
    trace = tmp_path / "lossless.binpb"
    trace.write_bytes(binpb)
    done = subprocess.run(
        [*client, "trace", str(trace)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert parse_trace_lines(done.stdout) == expected_trace_lines(lines)


def protobuf_depth(message: Message) -> int:
    """Nesting of submessages, as a decoder's recursion limit counts it (a map
    entry is a message level of its own)."""
    deepest = 0
    for field, value in message.ListFields():
        if field.message_type is None:
            continue
        if field.message_type.GetOptions().map_entry:
            entry_value = field.message_type.fields_by_name["value"]
            if entry_value.message_type is not None:
                for key in value:
                    deepest = max(deepest, protobuf_depth(value[key]) + 1)
            continue
        for item in value if field.is_repeated else [value]:
            deepest = max(deepest, protobuf_depth(item))
    return deepest + 1


def test_protobuf_nesting_stays_bounded_whatever_the_json_depth(lines: list[str]) -> None:
    deep = [line for line in lines if line.count("[") + line.count("{") > 100]
    assert len(deep) >= 2, "the crafted lines nest JSON hundreds of levels deep"
    # upb and Java refuse more than 100 levels by default; leave room for the
    # envelopes a message travels in (RunResponse, ServerEvent, ApprovalRequest).
    assert max(protobuf_depth(parse_message(line)) for line in lines) <= 60


def test_deep_records_decode_with_default_options(client: list[str], lines: list[str]) -> None:
    deep = [line for line in lines if line.count("[") + line.count("{") > 100]
    sink = io.BytesIO()
    write_binpb((parse_message(line) for line in deep), sink)
    done = subprocess.run(
        [*client, "echo"], input=sink.getvalue(), capture_output=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr.decode()
    back = [serialize_message(r.message).decode() for r in read_binpb(io.BytesIO(done.stdout))]
    assert back == deep
