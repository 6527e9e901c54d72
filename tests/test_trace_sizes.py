"""A .binpb is smaller than the JSONL it came from: on the conformance corpus,
and on schema-heavy traces, where each JSON Schema is stored once, as text
(figures for larger traces: benchmarks/sizes.py, BENCHMARKS.md)."""

from __future__ import annotations

import io
import random
from pathlib import Path
from typing import Any

from omni_grpc.convert import parse_message, serialize_message
from omni_grpc.convert._jsontext import dump_value
from omni_grpc.trace import read_binpb, write_binpb

CORPUS = Path(__file__).parent / "conformance"


def sizes(lines: list[bytes]) -> tuple[int, int]:
    sink = io.BytesIO()
    write_binpb((parse_message(line) for line in lines), sink)
    back = [serialize_message(r.message) for r in read_binpb(io.BytesIO(sink.getvalue()))]
    assert back == lines
    return sum(len(line) + 1 for line in lines), len(sink.getvalue())


def corpus() -> list[bytes]:
    lines = []
    for path in sorted(CORPUS.glob("*.jsonl")):
        for line in path.read_bytes().splitlines():
            try:
                parse_message(line)
            except ValueError:
                continue
            lines.append(line)
    return lines


def schema(rng: random.Random, depth: int = 0) -> dict[str, Any]:
    props: dict[str, Any] = {}
    for i in range(rng.randint(2, 6)):
        if depth < 3 and rng.random() < 0.3:
            props[f"field_{i}"] = schema(rng, depth + 1)
        else:
            props[f"field_{i}"] = {"type": rng.choice(["string", "integer", "boolean"])}
        props[f"field_{i}"]["description"] = f"what field {i} means, at depth {depth}"
    return {"type": "object", "properties": props, "required": sorted(props)[:1]}


def test_a_binpb_of_the_corpus_is_smaller() -> None:
    jsonl, binpb = sizes(corpus())
    assert binpb < jsonl


def test_a_binpb_of_a_schema_heavy_trace_is_smaller() -> None:
    rng = random.Random(3)
    tools = [
        {"name": f"tool_{i}", "description": "d", "parameters": schema(rng)} for i in range(400)
    ]
    heavy = {
        "timestamp": "2026-01-02T03:04:05.678Z",
        "type": "event_msg",
        "payload": {"type": "tool_list_ready", "tools": tools},
    }
    lines = [*corpus()[:5], dump_value(heavy).encode()]
    assert len(lines[-1]) > 200_000
    jsonl, binpb = sizes(lines)
    assert binpb < jsonl
