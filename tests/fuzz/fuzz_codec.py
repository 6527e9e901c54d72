"""An atheris (libFuzzer) harness over the codec's three ways in: one JSON
message (``parse_message``), a JSONL trace (``read_jsonl``) and a ``.binpb``
trace (``read_binpb``).

The contract it checks for any bytes: conversion either succeeds or raises
``ConversionError``; whatever converts serializes to one line of JSON that
parses back to the same line. Anything else (another exception, a line that
does not round-trip) is a crash, which libFuzzer reports with the input.

Run: ``python tests/fuzz/fuzz_codec.py [libFuzzer flags] [CORPUS_DIR...]``,
for instance ``-runs=20000 -seed=1``; tests/fuzz/test_fuzz_codec.py runs a
short bounded session in the suite.
"""

from __future__ import annotations

import contextlib
import io
import sys

import atheris

with atheris.instrument_imports(include=["omni_grpc"]):
    from omni_grpc.convert import ConversionError, parse_message, serialize_message
    from omni_grpc.trace import read_binpb, read_jsonl

MAX_BYTES = 1 << 16


def check_round_trip(line: bytes) -> None:
    if b"\n" in line or b"\r" in line:
        raise AssertionError(f"serialize_message wrote more than one line: {line!r}")
    again = serialize_message(parse_message(line))
    if again != line:
        raise AssertionError(f"not stable: {line!r} became {again!r}")


def one_input(data: bytes) -> None:
    try:
        message = parse_message(data, max_bytes=MAX_BYTES)
    except ConversionError:
        pass
    else:
        # Refusing to write is allowed; writing garbage is not.
        with contextlib.suppress(ConversionError):
            check_round_trip(serialize_message(message))
    for reader in (read_jsonl, read_binpb):
        try:
            for record in reader(io.BytesIO(data)):
                with contextlib.suppress(ConversionError):
                    check_round_trip(serialize_message(record.message))
        except ConversionError:
            pass


def main() -> None:
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
