"""Trace sizes: a ``.binpb`` against the JSONL it came from, on the
conformance corpus, on one generated trace per provider style, and on a
schema-heavy trace (MCP-style tool lists whose JSON Schemas make lines of
several megabytes), plus the time to convert the schema-heavy trace each way
against the floor (orjson loads + dumps).

Provider styles (``style_lines``), each a session of tool-using turns as the
reference builders write them:

* ``openai``: Responses-API turns: a reasoning item (``thinking`` ``""``,
  fidelity ``{"id","encrypted_content"}``, keys not sorted, the content a
  Fernet token as OpenAI sends it: URL-safe base64 of version, time, IV,
  ciphertext and HMAC, 1-6 KB), text with fidelity ``{"id","phase"}``, tool
  calls with ``{"id"}``, outputs, usage;
* ``openai-reasoning``: the reasoning lines alone;
* ``anthropic``: thinking text with fidelity ``{"signature"}``, text, tool
  calls and outputs, usage;
* ``gemini``: thinking, text and tool calls with fidelity
  ``{"thoughtSignature"}`` (standard base64), and an ``inline_data`` image
  (base64 ``data``) every few turns;
* ``images``: each turn a user image as a data URL (``image_url``) and a
  tool output with a screenshot (``images``), 8-60 KB each;
* ``tool-args``: tool calls whose arguments are 5-60 KB of JSON text (a
  file written whole: code with quotes, newlines and indentation);
* ``schema-heavy``: a session whose tool list carries large JSON Schemas.

Each ``.binpb`` is written as ``omni-grpc convert`` writes it by default
(fidelity's long base64 as bytes, large tool lists compressed in the marked
form); each style's line also gives the size as ``convert --plain`` writes
it (every record its message, base64 as text), as ``convert --compress``
does (every large record ``zlib_record``) and, for comparison, the JSONL
gzipped whole (level 6), which no reader can stream record by record.

Usage: python benchmarks/sizes.py [--schema-lines 5] [--tools 900] [--turns 40] [--seed 1]
       [--sizes-only]
Traces are generated deterministically from --seed; sizes are exact, times
are the best of 3.
"""

from __future__ import annotations

import argparse
import base64
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


def _fernet(rng: random.Random, size: int) -> str:
    """A Fernet token as OpenAI's ``encrypted_content`` holds one: URL-safe
    base64 (padded) of version 0x80, a timestamp, a 16-byte IV, the
    ciphertext (whole AES blocks) and a 32-byte HMAC."""
    blocks = max(1, (size * 3 // 4 - 57) // 16)
    token = b"\x80" + (1767225600).to_bytes(8, "big") + rng.randbytes(16 + 16 * blocks + 32)
    return base64.urlsafe_b64encode(token).decode()


def _code(rng: random.Random, size: int) -> str:
    """Source text of about ``size`` characters: indented lines with quotes."""
    lines: list[str] = []
    total = 0
    while total < size:
        depth = rng.randint(0, 3)
        words = rng.choices(PROSE, k=rng.randint(2, 9))
        kind = rng.random()
        if kind < 0.3:
            line = f'{words[0]}_{words[1]} = "{" ".join(words[2:])}"'
        elif kind < 0.5:
            line = f"def {words[0]}_{words[1]}({', '.join(words[2:4])}):"
        elif kind < 0.7:
            line = f"return {words[0]}.get('{words[1]}', {rng.randint(0, 999)})"
        else:
            line = "# " + " ".join(words)
        lines.append("    " * depth + line)
        total += len(lines[-1]) + 1
    return "\n".join(lines) + "\n"


def _turn(rng: random.Random, clock: _Clock, style: str, n: int) -> list[bytes]:
    """One request: reasoning, text, a tool call and its output, usage."""
    lines = [_event(clock, {"type": "request_begin"})]
    text_fidelity: dict[str, Any] = {}
    call_fidelity: dict[str, Any] | None = None
    if style == "images":
        url = f"data:image/png;base64,{_b64(rng, rng.randint(8_000, 60_000))}"
        lines.append(_model(clock, {"type": "image_url", "role": "user", "image_url": url}))
    if style.startswith("openai"):
        content = _fernet(rng, rng.randint(1_000, 6_000))
        reasoning = {"id": f"rs_{_hex(rng, 48)}", "encrypted_content": content}
        thinking: dict[str, Any] = {"type": "thinking", "role": "assistant", "thinking": ""}
        lines.append(_model(clock, {**thinking, "stop_reason": "completed", "fidelity": reasoning}))
        text_fidelity = {"id": f"msg_{_hex(rng, 48)}", "phase": "commentary"}
        call_fidelity = {"id": f"fc_{_hex(rng, 48)}"}
    else:
        key = "thoughtSignature" if style == "gemini" else "signature"
        signature = {key: _b64(rng, rng.randint(300, 1_400) if style == "gemini" else 400)}
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
        if style == "gemini":
            text_fidelity = {key: _b64(rng, rng.randint(300, 1_400))}
            call_fidelity = {key: _b64(rng, rng.randint(300, 1_400))}
    if style == "gemini" and n % 3 == 0:
        image = {"type": "inline_data", "role": "assistant", "data": _b64(rng, 40_000)}
        image |= {"mime_type": "image/png", "stop_reason": "completed"}
        lines.append(_model(clock, image))
    text: dict[str, Any] = {"type": "text", "role": "assistant", "text": _prose(rng, 30)}
    text["stop_reason"] = "completed"
    if text_fidelity:
        text["fidelity"] = text_fidelity
    lines.append(_model(clock, text))
    call_id = f"call_{_hex(rng, 24)}"
    path = f"src/{rng.choice(WORDS)}_{n}.py"
    if style == "tool-args":
        name, arguments = (
            "write_file",
            {"path": path, "content": _code(rng, rng.randint(5_000, 60_000))},
        )
    else:
        name, arguments = "read_file", {"path": path, "limit": 200}
    call: dict[str, Any] = {
        "type": "tool_call",
        "role": "assistant",
        "name": name,
        "arguments": dump_value(arguments),
        "tool_call_id": call_id,
        "stop_reason": "completed",
    }
    if call_fidelity:
        call["fidelity"] = call_fidelity
    lines.append(_model(clock, call))
    decision = {"type": "approval_decision", "decision": "allow", "tool_call_id": call_id}
    lines.append(_event(clock, decision))
    output: dict[str, Any] = {
        "type": "tool_call_output",
        "role": "user",
        "output": _prose(rng, 80),
        "tool_call_id": call_id,
        "stop_reason": "completed",
    }
    if style == "images":
        screenshot = f"data:image/png;base64,{_b64(rng, rng.randint(8_000, 60_000))}"
        output = {**output, "images": [screenshot]}
        output["tool_call_id"] = output.pop("tool_call_id")
        output["stop_reason"] = output.pop("stop_reason")
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
        "provider": {"anthropic": "anthropic", "gemini": "google"}.get(style, "openai"),
        "model_id": {"anthropic": "claude-sonnet-4-5", "gemini": "gemini-2.5-pro"}.get(
            style, "gpt-5"
        ),
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


STYLES = [
    "openai",
    "openai-reasoning",
    "anthropic",
    "gemini",
    "images",
    "tool-args",
    "schema-heavy",
]


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
    parser.add_argument("--sizes-only", action="store_true", help="skip the timings")
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
        if not args.sizes_only:
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

    if args.sizes_only:
        return
    messages = [parse_message(line) for line in heavy]
    floor = best_seconds(lambda: [orjson.dumps(orjson.loads(line)) for line in heavy], 3)
    parse = best_seconds(lambda: [parse_message(line) for line in heavy], 3)
    write = best_seconds(lambda: [serialize_message(m) for m in messages], 3)
    print(f"  per MB of tool list: floor {floor / (mean * len(heavy) / 1e6) * 1e3:.1f} ms")
    print(f"  JSON -> proto {parse / floor:.1f}x the floor, proto -> JSON {write / floor:.1f}x")


if __name__ == "__main__":
    main()
