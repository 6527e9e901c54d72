"""Trace sizes: a ``.binpb`` against the JSONL it came from, on the
conformance corpus, on one generated trace per provider style, and on a
schema-heavy trace (MCP-style tool lists whose JSON Schemas make lines of
several megabytes), plus the time to convert the schema-heavy trace each way
against the floor (orjson loads + dumps).

Provider styles (``style_lines``), each a session of tool-using turns as the
reference builders write them:

* ``openai``: Responses-API turns: a reasoning item (``thinking`` ``""``,
  fidelity ``{"id","encrypted_content"}``, keys not sorted), text with
  fidelity ``{"id","phase"}``, tool calls with ``{"id"}``, outputs, usage;
* ``openai-reasoning``: the reasoning lines alone;
* ``anthropic``: thinking text with fidelity ``{"signature"}``, text, tool
  calls and outputs, usage;
* ``schema-heavy``: a session whose tool list carries large JSON Schemas.

Each ``.binpb`` is written as ``omni-grpc convert`` writes it by default
(fidelity's long base64 as bytes, large tool lists compressed in the marked
form); each style's line also gives the size as ``convert --plain`` writes
it (every record its message, base64 as text), as ``convert --compress``
does (every large record ``zlib_record``) and, for comparison, the JSONL
gzipped whole (level 6), which no reader can stream record by record.

Usage: python benchmarks/sizes.py [--schema-lines 5] [--tools 900] [--turns 40] [--seed 1]
Traces are generated deterministically from --seed; sizes are exact, times
are the best of 3.
"""

from __future__ import annotations

import argparse
import gzip
import io
import random
from typing import Any

import orjson
from _common import best_seconds, corpus_lines  # benchmarks/_common.py, beside this file

from omni_grpc.convert import parse_message, serialize_message
from omni_grpc.convert._jsontext import dump_value
from omni_grpc.trace import read_binpb, write_binpb
from omni_grpc.trace.convert import binpb_to_jsonl, jsonl_to_binpb

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


B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
PROSE = [*WORDS, "the", "a", "to", "of", "and", "we", "it", "this", "that", "in", "for"]


def _b64(rng: random.Random, size: int) -> str:
    return "".join(rng.choices(B64, k=size - size % 4))


def _prose(rng: random.Random, words: int) -> str:
    return " ".join(rng.choices(PROSE, k=words)).capitalize() + "."


def _hex(rng: random.Random, size: int) -> str:
    return "".join(rng.choices("0123456789abcdef", k=size))


class _Clock:
    def __init__(self) -> None:
        self.ms = 0

    def __call__(self) -> str:
        self.ms += 1337
        s, ms = divmod(self.ms, 1000)
        m, s = divmod(s, 60)
        return f"2026-01-02T03:{m % 60:02d}:{s:02d}.{ms:03d}Z"


def _envelope(clock: _Clock, kind: str, payload: dict[str, Any]) -> bytes:
    return dump_value({"timestamp": clock(), "type": kind, "payload": payload}).encode()


def _model(clock: _Clock, payload: dict[str, Any]) -> bytes:
    return _envelope(clock, "model_msg", payload)


def _event(clock: _Clock, payload: dict[str, Any]) -> bytes:
    return _envelope(clock, "event_msg", payload)


def _turn(rng: random.Random, clock: _Clock, style: str, n: int) -> list[bytes]:
    """One request: reasoning, text, a tool call and its output, usage."""
    lines = [_event(clock, {"type": "request_begin"})]
    if style.startswith("openai"):
        reasoning = {"id": f"rs_{_hex(rng, 48)}", "encrypted_content": _b64(rng, 1500)}
        thinking: dict[str, Any] = {"type": "thinking", "role": "assistant", "thinking": ""}
        lines.append(_model(clock, {**thinking, "stop_reason": "completed", "fidelity": reasoning}))
        text_fidelity: dict[str, Any] = {"id": f"msg_{_hex(rng, 48)}", "phase": "commentary"}
        call_fidelity: dict[str, Any] | None = {"id": f"fc_{_hex(rng, 48)}"}
    else:
        signature = {"signature": _b64(rng, 400)}
        lines.append(
            _model(
                clock,
                {
                    "type": "thinking",
                    "role": "assistant",
                    "thinking": _prose(rng, 60),
                    "stop_reason": "completed",
                    "fidelity": signature,
                },
            )
        )
        text_fidelity, call_fidelity = {}, None
    text: dict[str, Any] = {"type": "text", "role": "assistant", "text": _prose(rng, 30)}
    text["stop_reason"] = "completed"
    if text_fidelity:
        text["fidelity"] = text_fidelity
    lines.append(_model(clock, text))
    call_id = f"call_{_hex(rng, 24)}"
    call: dict[str, Any] = {
        "type": "tool_call",
        "role": "assistant",
        "name": "read_file",
        "arguments": dump_value({"path": f"src/{rng.choice(WORDS)}_{n}.py", "limit": 200}),
        "tool_call_id": call_id,
        "stop_reason": "completed",
    }
    if call_fidelity:
        call["fidelity"] = call_fidelity
    lines.append(_model(clock, call))
    decision = {"type": "approval_decision", "decision": "allow", "tool_call_id": call_id}
    lines.append(_event(clock, decision))
    output = {
        "type": "tool_call_output",
        "role": "user",
        "output": _prose(rng, 80),
        "tool_call_id": call_id,
        "stop_reason": "completed",
    }
    lines.append(_model(clock, output))
    counts = [rng.randint(0, 90_000) for _ in range(3)]
    usage = dict(zip(("cache_read", "cache_write", "output"), counts, strict=True))
    usage["total"] = sum(counts)
    lines.append(_event(clock, {"type": "token_usage", "session": usage, "request": usage}))
    lines.append(_event(clock, {"type": "request_end", "status": "completed"}))
    return lines


def style_lines(style: str, turns: int, seed: int, *, tools: int = 60) -> list[bytes]:
    """A generated trace of ``style`` (see the module docstring)."""
    rng = random.Random(f"{style}/{seed}")
    clock = _Clock()
    meta = {
        "session_id": f"session-2026-01-02-03-04-05-{_hex(rng, 8)}",
        "provider": "anthropic" if style == "anthropic" else "openai",
        "model_id": "claude-sonnet-4-5" if style == "anthropic" else "gpt-5",
        "model_context_window": 200000,
        "system_prompt": _prose(rng, 120),
        "agent_state": "",
        "workspace": "/work/project",
    }
    lines = [_envelope(clock, "session_meta", meta)]
    if style == "schema-heavy":
        listing = [
            {"name": f"mcp__tool_{i}", "description": _prose(rng, 20), "parameters": schema(rng)}
            for i in range(tools)
        ]
        lines.append(_event(clock, {"type": "tool_list_ready", "tools": listing}))
    lines.append(
        _model(
            clock,
            {"type": "text", "role": "user", "text": _prose(rng, 40), "stop_reason": "completed"},
        )
    )
    for n in range(turns):
        turn = _turn(rng, clock, style, n)
        if style == "openai-reasoning":
            turn = turn[1:2]  # the reasoning line alone
        lines += turn
    return lines


STYLES = ["openai", "openai-reasoning", "anthropic", "schema-heavy"]


def _times(lines: list[bytes]) -> str:
    """Each way's time against the floor (orjson loads + dumps), best of 5."""
    floor = best_seconds(lambda: [orjson.dumps(orjson.loads(line)) for line in lines], 5)
    messages = [parse_message(line) for line in lines]
    parse = best_seconds(lambda: [parse_message(line) for line in lines], 5)
    write = best_seconds(lambda: [serialize_message(m) for m in messages], 5)
    return f"JSON -> proto {parse / floor:.1f}x the floor, proto -> JSON {write / floor:.1f}x"


def _convert_times(lines: list[bytes]) -> str:
    """``omni-grpc convert``'s whole-trace functions, the default form
    against ``--plain``, best of 5 each (two rounds, the better ratio)."""
    text = b"".join(line + b"\n" for line in lines)
    ratios = []
    for _ in range(2):
        default, plain = io.BytesIO(), io.BytesIO()
        jsonl_to_binpb(io.BytesIO(text), default)
        jsonl_to_binpb(io.BytesIO(text), plain, plain=True)

        def there(as_plain: bool) -> float:
            return best_seconds(
                lambda: jsonl_to_binpb(io.BytesIO(text), io.BytesIO(), plain=as_plain), 5
            )

        def back(data: bytes) -> float:
            return best_seconds(lambda: binpb_to_jsonl(io.BytesIO(data), io.BytesIO()), 5)

        ratios.append(
            (there(False) / there(True), back(default.getvalue()) / back(plain.getvalue()))
        )
    to, fro = min(r[0] for r in ratios), min(r[1] for r in ratios)
    return f"convert, default against --plain: to .binpb {to:.2f}x, back {fro:.2f}x"


def sizes(lines: list[bytes], **kw: bool) -> tuple[int, int]:
    """The JSONL's size and the .binpb's, written with ``write_binpb(**kw)``."""
    sink = io.BytesIO()
    write_binpb((parse_message(line) for line in lines), sink, **kw)
    binpb = sink.getvalue()
    back = [serialize_message(r.message) for r in read_binpb(io.BytesIO(binpb))]
    assert back == lines, "the .binpb must give the JSONL back byte for byte"
    return sum(len(line) + 1 for line in lines), len(binpb)


def _gzipped(lines: list[bytes]) -> int:
    return len(gzip.compress(b"".join(line + b"\n" for line in lines), 6))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schema-lines", type=int, default=5)
    parser.add_argument("--tools", type=int, default=900)
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    corpus = corpus_lines()
    jsonl, binpb = sizes(corpus)
    _, plain = sizes(corpus, plain=True)
    _, packed = sizes(corpus, compress=True)
    print(f"conformance corpus: {len(corpus)} lines")
    print(
        f"  JSONL {jsonl:,} bytes, .binpb {binpb:,} bytes: {binpb / jsonl:.2f} of the JSONL "
        f"(--plain {plain / jsonl:.2f}, --compress {packed / jsonl:.2f})"
    )
    print(f"provider styles, {args.turns} turns each:")
    for style in STYLES:
        lines = style_lines(style, args.turns, args.seed)
        jsonl, binpb = sizes(lines)
        _, plain = sizes(lines, plain=True)
        _, packed = sizes(lines, compress=True)
        print(
            f"  {style:17} {len(lines):4} lines, JSONL {jsonl:>10,} B, .binpb {binpb:>10,} B: "
            f"{binpb / jsonl:.3f} of the JSONL (--plain {plain / jsonl:.3f}, "
            f"--compress {packed / jsonl:.3f}, JSONL gzipped whole {_gzipped(lines) / jsonl:.3f})"
        )
        print(f"  {'':17} {_times(lines)}")
        print(f"  {'':17} {_convert_times(lines)}")

    heavy = schema_heavy_lines(args.schema_lines, args.tools, args.seed)
    lines = [*corpus[:20], *heavy, *corpus[20:40]]
    jsonl, binpb = sizes(lines)
    _, plain = sizes(lines, plain=True)
    mean = sum(map(len, heavy)) / len(heavy)
    print(f"schema-heavy trace: {len(lines)} lines, {len(heavy)} tool lists of {mean / 1e6:.1f} MB")
    print(
        f"  JSONL {jsonl:,} bytes, .binpb {binpb:,} bytes: {binpb / jsonl:.2f} of the JSONL "
        f"(--plain {plain / jsonl:.2f})"
    )

    messages = [parse_message(line) for line in heavy]
    floor = best_seconds(lambda: [orjson.dumps(orjson.loads(line)) for line in heavy], 3)
    parse = best_seconds(lambda: [parse_message(line) for line in heavy], 3)
    write = best_seconds(lambda: [serialize_message(m) for m in messages], 3)
    print(f"  per MB of tool list: floor {floor / (mean * len(heavy) / 1e6) * 1e3:.1f} ms")
    print(f"  JSON -> proto {parse / floor:.1f}x the floor, proto -> JSON {write / floor:.1f}x")


if __name__ == "__main__":
    main()
