"""Builds the native codec for coverage-guided fuzzing under AddressSanitizer
and runs ``native_fuzz.py`` on it (atheris + libFuzzer).

The extension is compiled by clang with ``-fsanitize=address,undefined,
fuzzer-no-link`` (undefined behaviour traps, so it needs no runtime of its
own) and atheris' ``asan_with_fuzzer.so`` is preloaded: it carries the ASan
runtime and the libFuzzer the extension reports its coverage to. Python's
allocator is switched to malloc, so the codec's PyMem buffers get ASan's
redzones too (pymalloc would hide an overflow of a small buffer).

By hand, for a longer session (new inputs go to the first corpus folder):

    .venv/bin/python tests/fuzz/asan_fuzz.py -max_total_time=600 -seed=0 /tmp/omni-corpus

Any libFuzzer flag may be given; the seed corpus (the conformance lines, their
wire bytes and whole trace files), ``native_regressions/`` and a dictionary
(edge values and every schema key) are always added.
A crash writes ``crash-*`` (see ``-artifact_prefix=``); rerun one with
``asan_fuzz.py crash-...``. tests/fuzz/test_native_fuzz.py runs a bounded
session in the suite.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
SOURCE = ROOT / "src/omni_grpc/convert/_native.c"
CORPUS = ROOT / "tests/conformance"
REGRESSIONS = HERE / "native_regressions"
PLANT = HERE / "plant.h"


def clang() -> str | None:
    return shutil.which("clang") or shutil.which("clang-14")


def fuzzer_runtime() -> Path | None:
    """atheris' ASan runtime with libFuzzer in it, shipped in its wheel."""
    spec = importlib.util.find_spec("atheris")
    if spec is None or spec.origin is None:
        return None
    found = Path(spec.origin).resolve().parent.parent / "asan_with_fuzzer.so"
    return found if found.exists() else None


def missing_toolchain() -> str | None:
    if clang() is None:
        return "clang is missing (scripts/setup installs it from Debian)"
    if fuzzer_runtime() is None:
        return "atheris with asan_with_fuzzer.so is missing (scripts/setup installs the dev extras)"
    return None


def build(into: Path, *, planted: bool = False) -> Path:
    """The extension, instrumented; ``planted`` adds plant.h's faults (tests only)."""
    cc = clang()
    assert cc is not None, missing_toolchain()
    into.mkdir(parents=True, exist_ok=True)
    target = into / ("_codec" + (sysconfig.get_config_var("EXT_SUFFIX") or ".so"))
    command = [
        cc,
        "-O1",
        "-g",
        "-fsanitize=address,undefined,fuzzer-no-link",
        "-fsanitize-trap=undefined",
        "-fno-omit-frame-pointer",
        "-fPIC",
        "-shared",
        f"-I{sysconfig.get_paths()['include']}",
        *(["-include", str(PLANT)] if planted else []),
        str(SOURCE),
        "-o",
        str(target),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr}")
    return target


def write_seeds(into: Path) -> int:
    """One file per conformance line and per message's wire bytes, and each
    trace file whole, as JSONL and as ``.binpb``."""
    from omni_grpc.convert import ConversionError, parse_message
    from omni_grpc.trace import encode_frame

    if __package__:
        from . import default_form
    else:  # run as a script: this folder is first on sys.path
        import default_form

    into.mkdir(parents=True, exist_ok=True)
    count = 0

    def put(name: str, data: bytes) -> None:
        nonlocal count
        (into / name).write_bytes(data)
        count += 1

    for n, path in enumerate(sorted(CORPUS.glob("*.jsonl"))):
        data = path.read_bytes()
        put(f"trace-{n}", data[:16384])
        frames = b""
        for m, line in enumerate(data.splitlines()):
            if not line.strip():
                continue
            put(f"line-{n}-{m}", line)
            try:
                message = parse_message(line)
            except ConversionError:
                continue
            put(f"wire-{n}-{m}", message.SerializeToString(deterministic=True))
            frames += encode_frame(message)
        put(f"binpb-{n}", frames[:16384])
    for n, line in enumerate(ODD_LINES):
        put(f"odd-{n}", line)
    # The default .binpb form: base64 stored as bytes, tool lists marked.
    for n, line in enumerate(default_form.LINES):
        put(f"default-form-{n}", line)
    for name, data in default_form.frames().items():
        put(name, data)
    return count


# Issue 28's classes: an unknown kind in an envelope of empty type, numbers
# JavaScript never writes in each kind of number field, unsorted fidelity.
ODD_LINES = [
    b'{"timestamp":"t","type":"","payload":{"type":"future"}}',
    b'{"timestamp":"t","type":"x","payload":{"type":""}}',
    b'{"timestamp":"t","type":"event_msg","payload":{"type":"compaction_begin",'
    b'"reason":"context","mode":"summarize","context":1.0,"turns":-0}}',
    b'{"timestamp":"t","type":"model_msg","payload":{"type":"text","role":"assistant",'
    b'"text":"x","fidelity":{"id":"r","encrypted_content":-0.0,"n":1.0}}}',
    b'{"timestamp":"t","type":"event_msg","payload":{"type":"tool_list_ready","tools":'
    b'[{"name":"n","description":"d","parameters":{"max":1.0,"min":-0.0,"e":1e2}}]}}',
]


# Values the seeds lack and byte flips seldom make, each a token libFuzzer may
# insert anywhere: the edges of int64 and of JavaScript numbers, lone
# surrogates (escaped and raw), overlong UTF-8 and varints, deep nesting.
EDGE_TOKENS = [
    b"null", b"true", b"false", b"[]", b"{}", b'""', b"-0", b"1.0", b"1e21", b"5e-324",
    b"-0.0", b"1.0e0", b"4.464106288054542e+16",
    b"9007199254740993", b"9223372036854775807", b"9223372036854775808",
    b"-9223372036854775808", b"-9223372036854775809", b"18446744073709551616",
    b'"\\ud800"', b"\\udc00\\ud800", b"\\u0000", b"\\u2028", b"\xed\xa0\x80", b"\xc0\x80",
    b"\xf4\x90\x80\x80", b"\xff", b"[[[[[[[[[[", b'{"a":{"a":{"a":{"a":{"a":{"a":{"a":{"a":{"a":',
    b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", b"\x80\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01",
    # every JSON escape, a surrogate pair, upper-case hex, 2- to 4-byte UTF-8
    b"\\b", b"\\f", b"\\r", b"\\t", b"\\n", b"\\/", b'\\"', b"\\\\", b"\\ud83d\\ude00",
    b"\\u00E9", b"\\u001f", b"\\u007f", b"\xc3\xa9", b"\xe2\x80\xa8", b"\xf0\x9f\x98\x80",
]  # fmt: skip


def _field_names() -> set[str]:
    """Every field name of every message under OmniMessage (the JSON keys)."""
    from omni_grpc_proto.omni.v1.omni_pb2 import OmniMessage

    names: set[str] = set()
    todo, seen = [OmniMessage.DESCRIPTOR], set()
    while todo:
        descriptor = todo.pop()
        if descriptor.full_name in seen:
            continue
        seen.add(descriptor.full_name)
        for field in descriptor.fields:
            names.add(field.name)
            if field.message_type is not None:
                todo.append(field.message_type)
    return names


def _entry(token: bytes) -> str:
    plain = {b for b in range(0x20, 0x7F)} - set(b'"\\')
    return '"' + "".join(chr(b) if b in plain else f"\\x{b:02x}" for b in token) + '"'


def write_dictionary(path: Path) -> Path:
    """A libFuzzer dictionary (``-dict=``): the edge tokens and every key."""
    keys = (f'"{name}":'.encode() for name in sorted(_field_names()))
    path.write_text("".join(_entry(token) + "\n" for token in [*EDGE_TOKENS, *keys]))
    return path


def environment(extension: Path, plant: str | None = None) -> dict[str, str]:
    runtime = fuzzer_runtime()
    assert runtime is not None, missing_toolchain()
    env = {
        **os.environ,
        "LD_PRELOAD": str(runtime),
        "OMNI_FUZZ_EXTENSION": str(extension),
        "PYTHONMALLOC": "malloc",
        "PYTHONHASHSEED": "0",  # with -seed=, the same session every time
        # CPython is not built for leak checking; memory errors are the point.
        "ASAN_OPTIONS": "detect_leaks=0:allocator_may_return_null=1",
    }
    env.pop("OMNI_GRPC_NATIVE", None)
    symbolizer = shutil.which("llvm-symbolizer") or shutil.which("llvm-symbolizer-14")
    if symbolizer:
        env["ASAN_SYMBOLIZER_PATH"] = symbolizer
    if plant is not None:
        env["OMNI_PLANT"] = plant
    else:
        env.pop("OMNI_PLANT", None)
    return env


def corpus_args(args: list[str], seeds: Path) -> list[str]:
    """``args`` (libFuzzer flags, then corpus folders or inputs to rerun) with
    the seeds and the regressions added as corpus folders, unless inputs are
    being rerun."""
    if any(Path(a).is_file() for a in args if not a.startswith("-")):
        return args
    return [*args, str(seeds), *([str(REGRESSIONS)] if REGRESSIONS.is_dir() else [])]


def run(
    extension: Path,
    args: list[str],
    seeds: Path,
    *,
    plant: str | None = None,
    capture: bool = True,
    timeout: float | None = 600,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(HERE / "native_fuzz.py"), *corpus_args(args, seeds)],
        env=environment(extension, plant),
        capture_output=capture,
        text=True,
        timeout=timeout,
        check=False,
    )


def main(argv: list[str]) -> int:
    why = missing_toolchain()
    if why is not None:
        print(f"asan_fuzz: {why}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="omni-asan-fuzz-") as tmp:
        extension = build(Path(tmp, "build"))
        seeds = Path(tmp, "seeds")
        write_seeds(seeds)
        args = [f"-dict={write_dictionary(Path(tmp, 'omni.dict'))}", *argv]
        if not any(not a.startswith("-") for a in args):
            args.append(str(Path(tmp, "corpus")))  # somewhere for new inputs
            Path(tmp, "corpus").mkdir()
        return run(extension, args, seeds, capture=False, timeout=None).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
