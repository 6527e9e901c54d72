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


T = '"timestamp":"2026-01-02T03:04:05.678Z"'


def reasoning_line(blob_chars: int) -> bytes:
    """An OpenAI reasoning item: its fidelity keys are not sorted."""
    rng = random.Random(blob_chars)
    blob = "".join(
        rng.choices(
            "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/", k=blob_chars
        )
    )
    return (
        f'{{{T},"type":"model_msg","payload":{{"type":"thinking","role":"assistant",'
        f'"thinking":"","stop_reason":"completed","fidelity":{{"id":"rs_0123456789abcdef",'
        f'"encrypted_content":"{blob}"}}}}}}'
    ).encode()


def test_unsorted_fidelity_is_stored_once() -> None:
    """Issue 28: a 4.2 KB reasoning line became 8.1 KB (the Struct and
    fidelity_json). Its key order is now a key list; the values are stored once."""
    line = reasoning_line(4096)
    msg = parse_message(line)
    assert not msg.thinking.fidelity_json
    assert [(o.path, list(o.keys)) for o in msg.key_orders] == [
        ("/payload/fidelity", ["id", "encrypted_content"])
    ]
    jsonl, binpb = sizes([line])
    assert binpb < jsonl
    # What the .binpb adds beyond the blob is less than what the JSON does.
    assert binpb - 4096 < jsonl - 4096


def test_openai_style_turns_are_under_0_8_of_the_jsonl() -> None:
    lines = []
    for n in range(20):
        lines.append(reasoning_line(1200 + n))
        lines.append(
            f'{{{T},"type":"model_msg","payload":{{"type":"text","role":"assistant",'
            f'"text":"Reading the file {n} now.","stop_reason":"completed",'
            f'"fidelity":{{"id":"msg_{n:032x}","phase":"commentary"}}}}}}'.encode()
        )
        lines.append(
            f'{{{T},"type":"model_msg","payload":{{"type":"tool_call","role":"assistant",'
            f'"name":"read_file","arguments":"{{\\"path\\":\\"a{n}.py\\"}}",'
            f'"tool_call_id":"call_{n}","stop_reason":"completed",'
            f'"fidelity":{{"id":"fc_{n:032x}"}}}}}}'.encode()
        )
        lines.append(
            f'{{{T},"type":"event_msg","payload":{{"type":"token_usage","session":'
            '{"cache_read":1024,"cache_write":380,"output":77,"total":1481},"request":'
            '{"cache_read":1024,"cache_write":380,"output":77,"total":1481}}}'.encode()
        )
    jsonl, binpb = sizes(lines)
    assert binpb < 0.8 * jsonl


DATA = Path(__file__).parent / "data"


def test_a_binpb_written_with_fidelity_json_still_reads_back_byte_identically() -> None:
    """tests/data/fidelity_json_0_2_0.binpb was written by the codec before
    issue 28, which kept unsorted or inexact fidelity as fidelity_json."""
    records = list(read_binpb(io.BytesIO((DATA / "fidelity_json_0_2_0.binpb").read_bytes())))
    arms = [getattr(r.message, str(r.message.WhichOneof("payload"))) for r in records]
    assert sum(bool(arm.fidelity_json) for arm in arms) == 3
    lines = (DATA / "fidelity_json_0_2_0.jsonl").read_bytes().splitlines()
    assert [serialize_message(r.message) for r in records] == lines
