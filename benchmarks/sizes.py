"""Trace sizes: a ``.binpb`` against the JSONL it came from, on the
conformance corpus and on a schema-heavy trace (MCP-style tool lists whose
JSON Schemas make lines of several megabytes), plus the time to convert the
schema-heavy trace each way against the floor (orjson loads + dumps).

Usage: python benchmarks/sizes.py [--schema-lines 5] [--tools 900] [--seed 1]
The schema-heavy trace is generated (deterministically from --seed); sizes
are exact, times are the best of 3.
"""

from __future__ import annotations

import argparse
import io
import random
from typing import Any

import orjson
from _common import best_seconds, corpus_lines  # benchmarks/_common.py, beside this file

from omni_grpc.convert import parse_message, serialize_message
from omni_grpc.convert._jsontext import dump_value
from omni_grpc.trace import read_binpb, write_binpb

WORDS = ["path", "file", "name", "query", "limit", "offset", "mode", "recursive"]
WORDS += ["pattern", "encoding", "user", "repo", "branch"]


def schema(rng: random.Random, depth: int = 0) -> dict[str, Any]:
    """A JSON Schema as MCP servers publish them: "type" first, descriptions,
    enums, defaults, nested objects and arrays."""
    properties: dict[str, Any] = {}
    for _ in range(rng.randint(2, 7)):
        name = "_".join(rng.sample(WORDS, 2))
        kind = rng.choice(["string", "integer", "boolean", "object", "array", "number"])
        if kind == "object" and depth < 3:
            prop = schema(rng, depth + 1)
        elif kind == "array" and depth < 3:
            prop = {
                "type": "array",
                "items": schema(rng, depth + 1),
                "maxItems": rng.randint(1, 99),
            }
        else:
            prop = {"type": "string" if kind in ("object", "array") else kind}
        prop["description"] = " ".join(rng.choices(WORDS, k=rng.randint(4, 16))).capitalize()
        if prop["type"] == "string" and rng.random() < 0.3:
            prop["enum"] = rng.sample(WORDS, 3)
        if prop["type"] == "number" and rng.random() < 0.5:
            prop["minimum"] = round(rng.random(), 3)
        properties[name] = prop
    return {
        "type": "object",
        "properties": properties,
        "required": sorted(properties)[: rng.randint(0, len(properties))],
        "additionalProperties": False,
    }


def schema_heavy_lines(count: int, tools: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    lines = []
    for n in range(count):
        listing = [
            {
                "name": f"server{n}__tool_{i}",
                "description": " ".join(rng.choices(WORDS, k=24)),
                "parameters": schema(rng),
            }
            for i in range(tools)
        ]
        msg = {
            "timestamp": f"2026-01-02T03:04:{n:02d}.000Z",
            "type": "event_msg",
            "payload": {"type": "tool_list_ready", "tools": listing},
        }
        lines.append(dump_value(msg).encode())
    return lines


def sizes(lines: list[bytes]) -> tuple[int, int]:
    sink = io.BytesIO()
    write_binpb((parse_message(line) for line in lines), sink)
    binpb = sink.getvalue()
    back = [serialize_message(r.message) for r in read_binpb(io.BytesIO(binpb))]
    assert back == lines, "the .binpb must give the JSONL back byte for byte"
    return sum(len(line) + 1 for line in lines), len(binpb)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schema-lines", type=int, default=5)
    parser.add_argument("--tools", type=int, default=900)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    corpus = corpus_lines()
    jsonl, binpb = sizes(corpus)
    print(f"conformance corpus: {len(corpus)} lines")
    print(f"  JSONL {jsonl:,} bytes, .binpb {binpb:,} bytes: {binpb / jsonl:.2f} of the JSONL")

    heavy = schema_heavy_lines(args.schema_lines, args.tools, args.seed)
    lines = [*corpus[:20], *heavy, *corpus[20:40]]
    jsonl, binpb = sizes(lines)
    mean = sum(map(len, heavy)) / len(heavy)
    print(f"schema-heavy trace: {len(lines)} lines, {len(heavy)} tool lists of {mean / 1e6:.1f} MB")
    print(f"  JSONL {jsonl:,} bytes, .binpb {binpb:,} bytes: {binpb / jsonl:.2f} of the JSONL")

    messages = [parse_message(line) for line in heavy]
    floor = best_seconds(lambda: [orjson.dumps(orjson.loads(line)) for line in heavy], 3)
    parse = best_seconds(lambda: [parse_message(line) for line in heavy], 3)
    write = best_seconds(lambda: [serialize_message(m) for m in messages], 3)
    print(f"  per MB of tool list: floor {floor / (mean * len(heavy) / 1e6) * 1e3:.1f} ms")
    print(f"  JSON -> proto {parse / floor:.1f}x the floor, proto -> JSON {write / floor:.1f}x")


if __name__ == "__main__":
    main()
