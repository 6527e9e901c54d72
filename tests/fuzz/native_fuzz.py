"""The atheris (libFuzzer) target for the native codec under AddressSanitizer.

Started by ``asan_fuzz.py``, never directly: it builds the extension with
clang (``-fsanitize=address,undefined,fuzzer-no-link``), preloads atheris'
``asan_with_fuzzer.so`` and names the build in ``OMNI_FUZZ_EXTENSION``. That
build is loaded in place of the installed ``omni_grpc.convert._codec``, so the
C code reports its edge coverage to libFuzzer and every memory error aborts
with ASan's report.

Each input goes only through public entry points (the C functions' names may
change; these do not), once with the native codec and once with it switched
off, and the two runs must agree exactly:

* ``parse_message(data)`` and ``message_from_dict(orjson.loads(data))``: the
  message's wire bytes, or the ConversionError; what ``parse_message``
  accepts must also be written back and read back to the same message;
* ``serialize_message(msg)`` and ``message_to_jsonable(msg)`` (as orjson writes
  it) for ``msg = OmniMessage.FromString(data)``: the line, or the error;
* the trace path in memory: JSONL ``data`` read tolerantly, written as
  ``.binpb``, read back and written as JSONL (the ``omni-grpc convert`` path),
  with the lines skipped and why. The JSONL written from the ``.binpb`` must
  also equal the JSONL written from the records themselves (lossless);
* ``data`` as a ``.binpb`` trace written as JSONL: the JSONL, or the error.

The two trace paths also run the whole-trace batch conversion of
``omni-grpc convert`` (``trace.convert``) and require the bytes and reports
of the record-at-a-time readers and writers.

A disagreement, or any exception that is not a ConversionError, is a crash:
libFuzzer stops and writes the input to ``crash-*``.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import io
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

import atheris  # first: its libFuzzer is the one the extension reports coverage to
import orjson
from google.protobuf.message import DecodeError

from omni_grpc_proto.omni.v1.omni_pb2 import OmniMessage

MAX_BYTES = 1 << 16


def _load_extension(path: str) -> ModuleType:
    name = "omni_grpc.convert._codec"
    loader = importlib.machinery.ExtensionFileLoader(name, path)
    spec = importlib.util.spec_from_file_location(name, path, loader=loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    # _native imports the codec by this name; it now finds the ASan build.
    sys.modules[name] = module
    return module


NATIVE_BUILD = _load_extension(os.environ["OMNI_FUZZ_EXTENSION"])

with atheris.instrument_imports(include=["omni_grpc.convert", "omni_grpc.trace"]):
    from omni_grpc.convert import (
        ConversionError,
        message_from_dict,
        message_to_jsonable,
        parse_message,
        serialize_message,
    )
    from omni_grpc.convert._jsontext import dumps
    from omni_grpc.trace.convert import binpb_to_jsonl, jsonl_to_binpb
    from omni_grpc.trace.formats import TraceFormat, read_records, write_records

# Every omni_grpc module that holds the native codec as NATIVE: switching them
# all off gives the pure-Python reference, wherever the codec is consulted.
SWITCHES = [
    module
    for name, module in list(sys.modules.items())
    if name.startswith("omni_grpc") and getattr(module, "NATIVE", None) is NATIVE_BUILD
]
if not SWITCHES:
    sys.exit(
        "native_fuzz: the ASan build is not the codec in use (it did not configure, "
        "or OMNI_GRPC_NATIVE=0): nothing native would be fuzzed"
    )


@contextmanager
def pure() -> Iterator[None]:
    for module in SWITCHES:
        module.NATIVE = None  # type: ignore[attr-defined]
    try:
        yield
    finally:
        for module in SWITCHES:
            module.NATIVE = NATIVE_BUILD  # type: ignore[attr-defined]


def outcome(work: Callable[[], Any]) -> tuple[Any, ...]:
    try:
        return ("ok", work())
    except ConversionError as exc:
        return ("error", type(exc).__name__, str(exc))


def parsed(data: bytes) -> tuple[bytes, bytes]:
    """The message's wire bytes and the line written back from it: what the
    parser accepts must be written back, and read back to the same message
    (issue 28), on either path."""
    msg = parse_message(data, max_bytes=MAX_BYTES)
    try:
        line = serialize_message(msg)
    except ConversionError as exc:
        raise AssertionError(f"parsed but not written back: {data!r}: {exc}") from None
    if parse_message(line) != msg:
        raise AssertionError(f"{data!r} was written as {line!r}, which reads back differently")
    return msg.SerializeToString(deterministic=True), line


def _written(records: Any, fmt: TraceFormat) -> bytes:
    sink = io.BytesIO()
    write_records((r.message for r in records), sink, fmt)
    return sink.getvalue()


def _converted(convert: Callable[..., int], data: bytes, **options: Any) -> bytes:
    sink = io.BytesIO()
    convert(io.BytesIO(data), sink, **options)
    return sink.getvalue()


def trace(data: bytes) -> tuple[Any, ...]:
    """JSONL -> .binpb -> JSONL a record at a time, and as ``omni-grpc
    convert`` does it, in batches: both ways must give the same frames, the
    same skipped lines and the same JSONL back."""
    skipped: list[Any] = []
    records = list(read_records(io.BytesIO(data), "jsonl", tolerant=True, on_skip=skipped.append))
    binpb = _written(records, "binpb")
    try:  # every line the reader accepted is written back
        back = _written(read_records(io.BytesIO(binpb), "binpb"), "jsonl")
        direct = _written(records, "jsonl")
    except ConversionError as exc:
        raise AssertionError(f"a line read from {data!r} was not written back: {exc}") from None
    if back != direct:
        raise AssertionError(f".binpb is not lossless: {direct!r} came back as {back!r}")
    batch_skipped: list[Any] = []
    batch = outcome(
        lambda: _converted(jsonl_to_binpb, data, tolerant=True, on_skip=batch_skipped.append)
    )
    if batch != ("ok", binpb) or batch_skipped != skipped:
        raise AssertionError(
            f"jsonl_to_binpb gave {batch!r}, skipping {batch_skipped!r}; "
            f"a record at a time gave {binpb!r}, skipping {skipped!r}"
        )
    batch_back = outcome(lambda: _converted(binpb_to_jsonl, binpb))
    if batch_back != ("ok", back):
        raise AssertionError(f"binpb_to_jsonl gave {batch_back!r}, a record at a time {back!r}")
    return [r.line for r in records], skipped, binpb, back


def frames(data: bytes) -> tuple[Any, ...]:
    """``data`` as a .binpb trace written as JSONL, in batches and a record
    at a time: the same JSONL, or an error both ways (a batch names the
    record of a message it cannot write, so only the error class must agree)."""
    batch = outcome(lambda: _converted(binpb_to_jsonl, data))
    single = outcome(lambda: _written(read_records(io.BytesIO(data), "binpb"), "jsonl"))
    if batch[:2] != single[:2]:
        raise AssertionError(f"binpb_to_jsonl gave {batch!r}, a record at a time {single!r}")
    return batch


PATHS = (
    "parse_message",
    "message_from_dict",
    "serialize_message",
    "message_to_jsonable",
    "trace JSONL->.binpb->JSONL",
    "trace .binpb->JSONL",
)
NOT_THIS_KIND = ("not this kind of input",)


def run_all(data: bytes) -> tuple[Any, ...]:
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        obj = None
    try:
        msg: OmniMessage | None = OmniMessage.FromString(data)
    except DecodeError:
        msg = None
    return (
        outcome(lambda: parsed(data)),
        NOT_THIS_KIND
        if type(obj) is not dict
        else outcome(lambda: message_from_dict(obj).SerializeToString(deterministic=True)),
        NOT_THIS_KIND if msg is None else outcome(lambda: serialize_message(msg)),
        NOT_THIS_KIND if msg is None else outcome(lambda: dumps(message_to_jsonable(msg))),
        outcome(lambda: trace(data)),
        frames(data),
    )


def one_input(data: bytes) -> None:
    native = run_all(data)
    with pure():
        reference = run_all(data)
    if native != reference:
        where = [n for n, a, b in zip(PATHS, native, reference, strict=True) if a != b]
        raise AssertionError(
            f"native and Python codecs differ in {', '.join(where)} on {data!r}:\n"
            f"  native: {native!r}\n  python: {reference!r}"
        )


def main() -> None:
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
