"""Base64 strings of fidelity stored as bytes in .binpb records
(``base64_values``): only text that comes back exactly, byte-exact round trip
for any string, readable from the stubs alone, an edit wins over the hint,
and ``--plain`` keeps the older form."""

from __future__ import annotations

import base64
import io
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from omni_grpc.convert import parse_message, serialize_message
from omni_grpc.convert._base64 import PACK_FROM, canonical_bytes, pack, unpack
from omni_grpc.convert._jsontext import dump_value
from omni_grpc.trace import read_binpb, write_binpb
from omni_grpc.trace.convert import binpb_to_jsonl, jsonl_to_binpb
from omni_grpc_proto.omni.v1.omni_pb2 import Base64Value, OmniMessage

sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
from sizes import STYLES, style_lines  # benchmarks/sizes.py: its traces

CLI = str(Path(sys.executable).with_name("omni-grpc"))


def frames(data: bytes) -> list[bytes]:
    from google.protobuf.internal.decoder import _DecodeVarint

    out, pos = [], 0
    while pos < len(data):
        length, pos = _DecodeVarint(data, pos)
        out.append(data[pos : pos + length])
        pos += length
    return out


def reasoning_line(fidelity: dict[str, object], arm: str = "thinking") -> bytes:
    payload: dict[str, object] = {"type": arm, "role": "assistant"}
    payload[{"thinking": "thinking", "text": "text"}[arm]] = ""
    payload["stop_reason"] = "completed"
    payload["fidelity"] = fidelity
    envelope = {"timestamp": "2026-01-02T03:04:05.000Z", "type": "model_msg", "payload": payload}
    return dump_value(envelope).encode()


def to_binpb(lines: list[bytes], **kw: bool) -> bytes:
    sink = io.BytesIO()
    write_binpb((parse_message(line) for line in lines), sink, **kw)
    return sink.getvalue()


def back(data: bytes) -> list[bytes]:
    return [serialize_message(r.message) for r in read_binpb(io.BytesIO(data))]


@pytest.mark.parametrize("style", STYLES)
def test_provider_styles_by_default(style: str) -> None:
    """Issue 28: the default .binpb (no compression) of the base64-heavy
    styles is under 0.8 of the JSONL (it was 0.96 for reasoning lines)."""
    lines = style_lines(style, 8, 1)
    data = to_binpb(lines)
    assert back(data) == lines
    jsonl = sum(len(line) + 1 for line in lines)
    plain = len(to_binpb(lines, plain=True))
    assert len(data) < plain  # base64 as bytes is smaller wherever it is used
    assert len(data) < 0.8 * jsonl, (style, len(data) / jsonl)
    if style != "schema-heavy":  # its tool list is marked (test_trace_binpb_schemas.py)
        assert not any(OmniMessage.FromString(body).zlib_record for body in frames(data))


def oracle(text: str) -> bytes | None:
    """Canonical base64, by the standard library's own encoder."""
    try:
        data = base64.b64decode(text, validate=True)
    except ValueError:
        return None
    return data if base64.b64encode(data).decode() == text else None


ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
base64ish = st.one_of(
    st.binary(min_size=90, max_size=600).map(lambda b: base64.b64encode(b).decode()),
    # one character changed, dropped or added: mostly not canonical any more
    st.tuples(
        st.binary(min_size=90, max_size=300).map(lambda b: base64.b64encode(b).decode()),
        st.integers(0, 10_000),
        st.sampled_from(["", "=", "A", "_", "-", "\n", " ", "é", "\\", '"', "\ud800"]),
        st.booleans(),
    ).map(lambda t: t[0][: t[1] % len(t[0])] + t[2] + t[0][t[1] % len(t[0]) + int(t[3]) :]),
    st.text(min_size=0, max_size=400),
    st.text(alphabet=ALPHABET + "=", max_size=400),
)


@settings(max_examples=300, deadline=None)
@given(base64ish, st.sampled_from(["thinking", "text"]))
def test_any_string_round_trips_byte_for_byte(text: str, arm: str) -> None:
    """JSONL -> .binpb -> JSONL gives the line back for any string, and the
    string is stored as bytes exactly when it is long canonical base64."""
    line = reasoning_line({"id": "rs_1", "encrypted_content": text, "n": [text]}, arm)
    data = to_binpb([line])
    assert back(data) == [line]
    (body,) = frames(data)
    stored = OmniMessage.FromString(body)
    want = oracle(text) if len(text) >= PACK_FROM else None
    assert canonical_bytes(text) == oracle(text)
    if want is None:
        assert not stored.base64_values
    else:
        assert [(b.path, b.data) for b in stored.base64_values] == [
            ("/payload/fidelity/encrypted_content", want),
            ("/payload/fidelity/n/0", want),
        ]
    # the batch converter (native where it can) writes the same bytes, both ways
    sink, out = io.BytesIO(), io.BytesIO()
    jsonl_to_binpb(io.BytesIO(line + b"\n"), sink)
    assert sink.getvalue() == data
    binpb_to_jsonl(io.BytesIO(data), out)
    assert out.getvalue() == line + b"\n"


def test_a_stub_only_reader_reads_the_bytes() -> None:
    """What a reader built from the generated stubs sees: the Struct holds ""
    at the path, the bytes are in a typed field, and the standard base64
    encoder gives the text."""
    secret = base64.b64encode(bytes(range(256)) * 3).decode()
    line = reasoning_line({"id": "rs_1", "encrypted_content": secret})
    (body,) = frames(to_binpb([line]))
    stub = OmniMessage.FromString(body)
    assert stub.thinking.fidelity["encrypted_content"] == ""
    assert stub.thinking.fidelity["id"] == "rs_1"
    (hint,) = stub.base64_values
    assert hint.path == "/payload/fidelity/encrypted_content"
    assert base64.b64encode(hint.data).decode() == secret
    assert len(body) < len(parse_message(line).SerializeToString()) - len(secret) // 5


def packed(line: bytes) -> OmniMessage:
    msg = pack(parse_message(line))
    assert msg.base64_values
    return msg


SECRET = base64.b64encode(b"\x01\x02" * 200).decode()


def test_an_edit_of_the_value_wins_over_the_hint() -> None:
    line = reasoning_line({"encrypted_content": SECRET, "id": "rs_1"})
    msg = packed(line)
    msg.thinking.fidelity["encrypted_content"] = "edited"
    assert b'"encrypted_content":"edited"' in serialize_message(msg)
    msg = packed(line)
    del msg.thinking.fidelity["encrypted_content"]
    assert b"encrypted_content" not in serialize_message(msg)
    msg = packed(line)
    msg.thinking.ClearField("fidelity")
    assert b"fidelity" not in serialize_message(msg)
    assert not unpack(msg).base64_values  # a stale hint is dropped, not kept


def test_a_relay_that_does_not_unpack_still_writes_the_text() -> None:
    """A Go or Java relay passes the record on unread: serialize_message
    applies the hint, and reading it as a .binpb record gives the same."""
    line = reasoning_line({"encrypted_content": SECRET, "id": "rs_1"})
    msg = packed(line)
    assert serialize_message(msg) == line
    relayed = OmniMessage.FromString(msg.SerializeToString())
    assert serialize_message(relayed) == line


@pytest.mark.parametrize(
    "path",
    [
        "/payload/fidelity/nope",
        "/payload/fidelity/id/0",
        "/payload/fidelity/list/7",
        "/payload/fidelity/list/01",
        "/payload/text",
        "",
        "/payload/fidelity/",
    ],
)
def test_a_hint_that_names_no_empty_string_is_ignored(path: str) -> None:
    line = reasoning_line({"id": "rs_1", "list": ["", "x"]})
    msg = parse_message(line)
    msg.base64_values.append(Base64Value(path=path, data=b"\xff" * 200))
    assert serialize_message(msg) == line


def test_an_empty_string_a_hint_names_takes_its_text() -> None:
    """The other side of the rule: a Struct "" at a hinted path is the hint's
    text, which is how a Go program writes such a record itself."""
    line = reasoning_line({"id": "rs_1", "list": ["", "x"]})
    msg = parse_message(line)
    msg.base64_values.append(Base64Value(path="/payload/fidelity/list/0", data=b"ab"))
    assert b'"list":["YWI=","x"]' in serialize_message(msg)


def test_no_packing_where_the_exact_text_is_kept() -> None:
    """A fidelity kept as fidelity_json (a key with a lone surrogate) is
    written from that text; a "" in its Struct would read as an edit."""
    line = reasoning_line({"\ud800": 1, "encrypted_content": SECRET})
    msg = parse_message(line)
    assert msg.thinking.fidelity_json
    assert pack(msg) is msg
    assert back(to_binpb([line])) == [line]


def test_cli_plain_keeps_base64_as_text(tmp_path: Path) -> None:
    lines = style_lines("openai-reasoning", 3, 1)
    source = tmp_path / "in.jsonl"
    source.write_bytes(b"".join(line + b"\n" for line in lines))
    for flags, name in (([], "default.binpb"), (["--plain"], "plain.binpb")):
        done = subprocess.run(
            [CLI, "convert", str(source), str(tmp_path / name), *flags],
            capture_output=True,
            check=False,
        )
        assert done.returncode == 0, done.stderr
    default = (tmp_path / "default.binpb").read_bytes()
    plain = (tmp_path / "plain.binpb").read_bytes()
    assert any(OmniMessage.FromString(b).base64_values for b in frames(default))
    assert not any(OmniMessage.FromString(b).base64_values for b in frames(plain))
    assert frames(plain) == [
        parse_message(line).SerializeToString(deterministic=True) for line in lines
    ]
    assert back(default) == back(plain) == lines
    done = subprocess.run(
        [CLI, "convert", str(source), str(tmp_path / "x.binpb"), "--plain", "--compress"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2 and "--plain and --compress" in done.stderr
    done = subprocess.run(
        [CLI, "convert", str(source), str(tmp_path / "x.jsonl"), "--plain"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2 and "--plain applies to .binpb output only" in done.stderr
