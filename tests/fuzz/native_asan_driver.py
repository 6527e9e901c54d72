"""Runs the native codec, built with AddressSanitizer, over mutated inputs.

Started by test_native_asan.py in a child process with libasan preloaded:
``python native_asan_driver.py EXTENSION RUNS SEED``. Loads the given build
as ``omni_grpc.convert._codec``, configures it from the schema tables, then
feeds it mutated wire bytes and mutated parsed lines. A memory error aborts
the process (ASan's report on stderr); otherwise it prints the counts.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import random
import sys
from pathlib import Path
from typing import Any

import orjson


def load(path: str) -> Any:
    loader = importlib.machinery.ExtensionFileLoader("omni_grpc.convert._codec", path)
    spec = importlib.util.spec_from_file_location("omni_grpc.convert._codec", path, loader=loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def mutate(data: bytes, rng: random.Random) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randrange(1, 4)):
        op = rng.randrange(5)
        if op == 0 and b:
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        elif op == 1:
            b = b[: rng.randrange(len(b) + 1)]
        elif op == 2:
            at = rng.randrange(len(b) + 1)
            b[at:at] = rng.randbytes(rng.randrange(1, 12))
        elif op == 3 and b:
            b[rng.randrange(len(b))] = rng.choice([0x00, 0x7F, 0x80, 0xFF, 0xC0, 0xED, 0x0A])
        elif b:
            at = rng.randrange(len(b))
            b[at:at] = b[rng.randrange(len(b)) :][: rng.randrange(1, 40)]
    return bytes(b)


def main() -> None:
    path, runs, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    from omni_grpc.convert import _native, parse_message

    module = load(path)
    _native._configure(module)
    rng = random.Random(seed)
    corpus = Path(__file__).resolve().parent.parent / "conformance"
    lines = [
        line for p in sorted(corpus.glob("*.jsonl")) for line in p.read_bytes().split(b"\n") if line
    ]
    wires, objs = [], []
    for line in lines:
        try:
            wires.append(parse_message(line).SerializeToString())
            objs.append(line)
        except Exception:
            continue
    decoded = encoded = 0
    for _ in range(runs):
        out = module.decode(mutate(rng.choice(wires), rng))
        decoded += out is not None
        try:
            obj = orjson.loads(mutate(rng.choice(objs), rng))
        except orjson.JSONDecodeError:
            continue
        if type(obj) is dict:
            encoded += module.encode(obj) is not None
    print(f"ok {runs} runs, {decoded} decoded, {encoded} encoded")


if __name__ == "__main__":
    main()
