"""An atheris (libFuzzer) harness over the codec's three ways in: one JSON
message (``parse_message``), a JSONL trace (``read_jsonl``) and a ``.binpb``
trace (``read_binpb``).

The contract it checks for any bytes: conversion either succeeds or raises
``ConversionError``; whatever converts serializes to one line of JSON that
parses back to the same line. Whatever JSON the parser accepts (one message,
or a JSONL record) must also be written back, as
``JSON.stringify(JSON.parse(text))``, and parse to the identical message
(issue 28: accepted forward, refused back). Anything else (another
exception, a line that does not round-trip) is a crash, which libFuzzer
reports with the input.

Run: ``python tests/fuzz/fuzz_codec.py [libFuzzer flags] [CORPUS_DIR...]``,
for instance ``-runs=20000 -seed=1``; tests/fuzz/test_fuzz_codec.py runs a
short bounded session in the suite.
"""

from __future__ import annotations

import contextlib
import io
import sys

import atheris

from omni_grpc_proto.omni.v1 import omni_pb2

with atheris.instrument_imports(include=["omni_grpc"]):
    from omni_grpc.convert import ConversionError, parse_message, serialize_message
    from omni_grpc.convert._jsontext import dump_value, loads
    from omni_grpc.trace import read_binpb, read_jsonl

OmniMessage = omni_pb2.OmniMessage
MAX_BYTES = 1 << 16


def check_round_trip(line: bytes) -> None:
    if b"\n" in line or b"\r" in line:
        raise AssertionError(f"serialize_message wrote more than one line: {line!r}")
    again = serialize_message(parse_message(line))
    if again != line:
        raise AssertionError(f"not stable: {line!r} became {again!r}")


def check_accepted(text: bytes, message: OmniMessage) -> None:
    """A message parsed from ``text`` is written back, normalised as
    JavaScript would, and parses to the identical message."""
    line = serialize_message(message)  # a ConversionError here is a crash
    expected = dump_value(loads(text)).encode()
    if line != expected:
        raise AssertionError(f"accepted {text!r} but wrote {line!r}, not {expected!r}")
    if parse_message(line) != message:
        raise AssertionError(f"{text!r}: proto -> JSON -> proto is not identity")
    check_round_trip(line)


def one_input(data: bytes) -> None:
    try:
        message = parse_message(data, max_bytes=MAX_BYTES)
    except ConversionError:
        pass
    else:
        check_accepted(data, message)
    try:
        for record in read_jsonl(io.BytesIO(data)):
            check_round_trip(serialize_message(record.message))
    except ConversionError:
        pass
    try:
        for record in read_binpb(io.BytesIO(data)):
            # Any protobuf message may come in a .binpb: refusing to write
            # an inconsistent one is allowed; writing garbage is not.
            with contextlib.suppress(ConversionError):
                check_round_trip(serialize_message(record.message))
    except ConversionError:
        pass


def main() -> None:
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
