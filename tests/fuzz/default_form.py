"""Seeds in the default ``.binpb`` form (issue 28), for both fuzzers: lines
whose fidelity holds long canonical base64 (stored as ``base64_values``) or
near misses that stay text, tool lists large enough to be stored in the
marked form, their frames as ``omni-grpc convert`` writes them by default,
and frames a reader must refuse or read with care (a bad marked stream, a
hint naming no ``""``). The conformance corpus has marked tool lists but no
base64 long enough to be stored as bytes."""

from __future__ import annotations

import base64
import zlib

from omni_grpc.convert import parse_message
from omni_grpc.convert._jsontext import dump_value
from omni_grpc.trace.binpb import MARK, encode_frame, encode_varint
from omni_grpc_proto.omni.v1.omni_pb2 import OmniMessage

SECRET = base64.b64encode(bytes(range(7, 249))).decode()  # canonical, 324 characters, one "="


def _line(kind: str, payload: dict[str, object]) -> bytes:
    return dump_value({"timestamp": "t", "type": kind, "payload": payload}).encode()


def _schema(n: int) -> dict[str, object]:
    return {
        "type": "object",
        "properties": {f"p{i}": {"type": "string", "description": "a path"} for i in range(n)},
    }


LINES = [
    # OpenAI reasoning: keys not sorted, the blob stored as bytes
    _line(
        "model_msg",
        {
            "type": "thinking",
            "role": "assistant",
            "thinking": "",
            "stop_reason": "completed",
            "fidelity": {"id": "rs_1", "encrypted_content": SECRET},
        },
    ),
    # Anthropic's signature, and base64 nested under keys that need escapes
    _line(
        "model_msg",
        {
            "type": "text",
            "role": "assistant",
            "text": "x",
            "fidelity": {"signature": SECRET, "a/b~": [{"s": SECRET[4:]}, ""], "e": ""},
        },
    ),
    # near misses that stay text: URL-safe, unpadded, a stray padding bit, short
    _line(
        "model_msg",
        {
            "type": "tool_call",
            "role": "assistant",
            "name": "n",
            "arguments": "{}",
            "tool_call_id": "c",
            "fidelity": {
                "u": SECRET.replace("+", "-").replace("/", "_"),
                "p": SECRET.rstrip("="),
                "b": SECRET[:-3] + "B==",
                "s": SECRET[:100],
            },
        },
    ),
    # a tool list stored in the marked form, and a legacy meta with tools
    _line(
        "event_msg",
        {
            "type": "tool_list_ready",
            "tools": [
                {"name": f"t{i}", "description": "d", "parameters": _schema(4)} for i in range(3)
            ],
        },
    ),
    dump_value(
        {
            "timestamp": "t",
            "type": "session_meta",
            "payload": {
                "session_id": "s",
                "provider": "p",
                "model_id": "m",
                "tools": [{"name": "t", "description": "d", "parameters": _schema(8)}],
            },
        }
    ).encode(),
]


def _frame(body: bytes) -> bytes:
    return encode_varint(len(body)) + body


def _body(frame: bytes) -> bytes:
    from google.protobuf.internal.decoder import _DecodeVarint  # type: ignore[attr-defined]

    length, start = _DecodeVarint(frame, 0)
    return frame[start : start + length]


def frames() -> dict[str, bytes]:
    """Named .binpb seeds: the lines' default frames together and one by
    one, and frames a reader must handle with care."""
    messages = [parse_message(line) for line in LINES]
    default = [encode_frame(m) for m in messages]
    edited = OmniMessage()
    edited.CopyFrom(messages[0])
    # the pre-release form (a path, refused), an invalid pointer among them
    edited.base64_values.add(path="/payload/fidelity/id", data=b"\x01\x02")
    edited.base64_values.add(path="/payload/fidelity/a~2b/0", data=b"\x03")
    stray = OmniMessage.FromString(_body(default[0]))
    arm = stray.WhichOneof("payload") or "text"
    fidelity = getattr(stray, arm).fidelity
    fidelity["copied"] = "\x00base64:0:00000000"  # another record's bytes
    fidelity["beyond"] = f"\x00base64:{len(stray.base64_values)}:00000000"  # names no entry
    marker = OmniMessage.FromString(_body(default[0]))
    getattr(marker, arm).fidelity["\x00fidelity_json"] = True  # a marker without the text
    tools = messages[3].SerializeToString(deterministic=True)
    out = {f"default-{n}.binpb": frame for n, frame in enumerate(default)}
    out["default-all.binpb"] = b"".join(default)
    out["hints-with-a-path.binpb"] = _frame(edited.SerializeToString())
    out["placeholders-astray.binpb"] = _frame(stray.SerializeToString())
    out["marker-without-text.binpb"] = _frame(marker.SerializeToString())
    out["marked-bad-zlib.binpb"] = _frame(MARK + zlib.compress(tools)[:-4])
    out["marked-twice.binpb"] = _frame(MARK + zlib.compress(MARK + zlib.compress(tools)))
    out["marked-then-plain.binpb"] = default[3] + default[0]
    return out
