"""The conformance corpus goes JSON -> proto -> JSON byte for byte."""

from __future__ import annotations

from pathlib import Path

import pytest

from omni_grpc.convert import (
    ConversionError,
    from_betterproto,
    parse_message,
    serialize_message,
    to_betterproto,
)
from omni_grpc.convert._shape import has_hints
from omni_grpc_proto.omni.v1 import omni_pb2

CORPUS = Path(__file__).parent / "conformance"
# Lines that are not JSON on purpose: the docs' illustrative head ("…") and
# the crash-torn tails.
NOT_JSON = {
    ("docs_sessions_and_traces_head.jsonl", 1),
    ("docs_sessions_and_traces_head.jsonl", 8),
    ("trace_torn_tail_before_resume_001.jsonl", 6),
    ("trace_torn_tail_healed_001.jsonl", 6),
}


def corpus_lines() -> list[tuple[str, int, bytes]]:
    lines = []
    for path in sorted(CORPUS.glob("*.jsonl")):
        for number, line in enumerate(path.read_bytes().split(b"\n"), 1):
            if line.strip():
                lines.append((path.name, number, line))
    return lines


LINES = corpus_lines()
PARSEABLE = [(n, i, line) for n, i, line in LINES if (n, i) not in NOT_JSON]


def test_corpus_is_all_there() -> None:
    assert len(PARSEABLE) == 272  # the count the corpus README states
    assert {(n, i) for n, i, _ in LINES} >= NOT_JSON


@pytest.mark.parametrize(("name", "number", "line"), PARSEABLE, ids=lambda v: str(v)[:40])
def test_line_round_trips_byte_identical(name: str, number: int, line: bytes) -> None:
    message = parse_message(line, line=number)
    assert serialize_message(message) == line
    # Through the wire: official bytes, then betterproto2 and back.
    wire = message.SerializeToString(deterministic=True)
    decoded = omni_pb2.OmniMessage.FromString(wire)
    assert serialize_message(decoded) == line
    twin = to_betterproto(decoded)
    assert omni_pb2.OmniMessage.FromString(bytes(twin)) == decoded
    if b"{" not in line.split(b'"payload":', 1)[1][1:]:
        # No Struct maps inside: field order alone decides, and the encoders
        # agree byte for byte (map entry order is unspecified by protobuf).
        assert bytes(twin) == wire
    assert serialize_message(from_betterproto(twin)) == line  # type: ignore[arg-type]


@pytest.mark.parametrize(("name", "number", "line"), PARSEABLE, ids=lambda v: str(v)[:40])
def test_proto_json_proto_is_stable(name: str, number: int, line: bytes) -> None:
    first = parse_message(line)
    again = parse_message(serialize_message(first))
    assert again == first
    assert again.SerializeToString(deterministic=True) == first.SerializeToString(
        deterministic=True
    )


@pytest.mark.parametrize("key", sorted(NOT_JSON))
def test_broken_lines_name_their_line(key: tuple[str, int]) -> None:
    name, number = key
    line = (CORPUS / name).read_bytes().split(b"\n")[number - 1]
    with pytest.raises(ConversionError) as caught:
        parse_message(line, line=number)
    assert caught.value.line == number
    assert str(caught.value).startswith(f"line {number}: not valid JSON")


def test_reference_form_lines_carry_no_hints() -> None:
    """Builder-made lines need no hints at all: the text of a JSON Schema or
    of an unsorted fidelity is a field of its own, not a hint."""
    shaped = [line for _, _, line in PARSEABLE if has_hints(parse_message(line))]
    assert shaped == []
    schemas = [line for _, _, line in PARSEABLE if b'"parameters"' in line]
    assert schemas, "the corpus has JSON Schemas"


def test_fast_path_and_general_codec_agree_on_the_corpus() -> None:
    import orjson

    from omni_grpc.convert import _message

    for _, _, line in PARSEABLE:
        parsed = orjson.loads(line)
        fast = _message._fast_decode(parsed)
        if fast is not None:
            assert fast == _message._general_decode(parsed, None), line
