"""Long base64 strings stored as bytes in .binpb records (``base64_values``):
only text that comes back exactly (either alphabet, a data-URL prefix),
byte-exact round trip for any string, readable from the stubs alone, an edit
of a value wins over its entry, and ``--plain`` keeps the older form. Edits
that move values: tests/test_trace_binpb_edits.py."""

from __future__ import annotations

import base64
import functools
import io
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from omni_grpc.convert import ConversionError, parse_message, serialize_message
from omni_grpc.convert._base64 import (
    ELIDED,
    PACK_FROM,
    canonical_bytes,
    pack,
    placeholder,
    unpack,
)
from omni_grpc.convert._jsontext import dump_value, loads
from omni_grpc.trace import read_binpb, write_binpb
from omni_grpc.trace.binpb import MARK
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
    """Issues 28 and 45: the default .binpb of every provider style is under
    0.8 of the JSONL (real OpenAI tokens were 0.98 for reasoning lines,
    images 0.99, large tool arguments 0.89)."""
    lines = style_lines(style, 8, 1)
    data = to_binpb(lines)
    assert back(data) == lines
    jsonl = sum(len(line) + 1 for line in lines)
    plain = len(to_binpb(lines, plain=True))
    assert len(data) < plain  # base64 as bytes is smaller wherever it is used
    assert len(data) < 0.8 * jsonl, (style, len(data) / jsonl)
    for body in frames(data):
        if body[:1] != MARK:  # tool lists and large arguments (test_trace_binpb_schemas.py)
            assert not OmniMessage.FromString(body).zlib_record


def oracle(text: str) -> tuple[bytes, bool] | None:
    """Canonical base64 in either alphabet (and whether URL-safe), by the
    standard library's own codecs."""
    for url_safe, decode, encode in (
        (False, base64.b64decode, base64.b64encode),
        (True, base64.urlsafe_b64decode, base64.urlsafe_b64encode),
    ):
        try:
            std = text.translate(str.maketrans("-_", "+/")) if url_safe else text
            data = base64.b64decode(std, validate=True)
        except ValueError:
            continue
        if encode(data).decode() == text and decode(text) == data:
            return data, url_safe and ("-" in text or "_" in text)
    return None


ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
base64ish = st.one_of(
    st.binary(min_size=90, max_size=600).map(lambda b: base64.b64encode(b).decode()),
    st.binary(min_size=90, max_size=600).map(lambda b: base64.urlsafe_b64encode(b).decode()),
    # one character changed, dropped or added: mostly not canonical any more
    st.tuples(
        st.binary(min_size=90, max_size=300).map(lambda b: base64.b64encode(b).decode()),
        st.integers(0, 10_000),
        st.sampled_from(["", "=", "A", "_", "-", "\n", " ", "é", "\\", '"', "\ud800", "\x00"]),
        st.booleans(),
    ).map(lambda t: t[0][: t[1] % len(t[0])] + t[2] + t[0][t[1] % len(t[0]) + int(t[3]) :]),
    st.text(min_size=0, max_size=400),
    st.text(alphabet=ALPHABET + "=-_", max_size=400),
)


@settings(max_examples=300, deadline=None)
@given(
    base64ish,
    st.sampled_from(["thinking", "text"]),
    st.sampled_from(["", "data:image/png;base64,"]),
)
def test_any_string_round_trips_byte_for_byte(text: str, arm: str, prefix: str) -> None:
    """JSONL -> .binpb -> JSONL gives the line back for any string, and the
    string is stored as bytes exactly when it is long canonical base64."""
    text = prefix + text
    line = reasoning_line({"id": "rs_1", "encrypted_content": text, "n": [text]}, arm)
    data = to_binpb([line])
    assert back(data) == [line]
    (body,) = frames(data)
    stored = OmniMessage.FromString(body)
    want = oracle(text[len(prefix) :]) if len(text) >= PACK_FROM else None
    if want is None:
        assert not stored.base64_values
    else:
        payload = getattr(stored, arm)
        entries = [(b.path, b.data, b.prefix, b.url_safe) for b in stored.base64_values]
        assert entries == [("", want[0], prefix, want[1])] * 2
        assert payload.fidelity["encrypted_content"] == placeholder(0, want[0])
        assert payload.fidelity["n"][0] == placeholder(1, want[0])
        if not prefix and not want[1]:
            assert canonical_bytes(text) == want[0]
    # the batch converter (native where it can) writes the same bytes, both ways
    sink, out = io.BytesIO(), io.BytesIO()
    jsonl_to_binpb(io.BytesIO(line + b"\n"), sink)
    assert sink.getvalue() == data
    binpb_to_jsonl(io.BytesIO(data), out)
    assert out.getvalue() == line + b"\n"


def test_a_stub_only_reader_reads_the_bytes() -> None:
    """What a reader built from the generated stubs sees: the Struct holds a
    placeholder naming the entry, the bytes are in a typed field, and the
    standard base64 encoder gives the text."""
    secret = base64.b64encode(bytes(range(256)) * 3).decode()
    line = reasoning_line({"id": "rs_1", "encrypted_content": secret})
    (body,) = frames(to_binpb([line]))
    stub = OmniMessage.FromString(body)
    (hint,) = stub.base64_values
    assert stub.thinking.fidelity["encrypted_content"] == "\x00base64:0:" + format(
        zlib.crc32(hint.data), "08x"
    )
    assert stub.thinking.fidelity["id"] == "rs_1"
    assert not hint.path and not hint.prefix and not hint.url_safe
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
    msg.thinking.fidelity["encrypted_content"] = ""  # "" is a value now, not a placeholder
    assert b'"encrypted_content":""' in serialize_message(msg)
    msg = packed(line)
    del msg.thinking.fidelity["encrypted_content"]
    assert b"encrypted_content" not in serialize_message(msg)
    msg = packed(line)
    msg.thinking.ClearField("fidelity")
    assert b"fidelity" not in serialize_message(msg)
    assert not unpack(msg).base64_values  # a stale entry is dropped, not kept


def test_a_relay_that_does_not_unpack_still_writes_the_text() -> None:
    """A Go or Java relay passes the record on unread: serialize_message
    applies the entries, and reading it as a .binpb record gives the same."""
    line = reasoning_line({"encrypted_content": SECRET, "id": "rs_1"})
    msg = packed(line)
    assert serialize_message(msg) == line
    relayed = OmniMessage.FromString(msg.SerializeToString())
    assert serialize_message(relayed) == line


def test_an_entry_no_placeholder_names_is_dropped() -> None:
    """An entry whose value an edit removed: the line is what the edit left."""
    line = reasoning_line({"id": "rs_1", "list": ["", "x"]})
    msg = parse_message(line)
    msg.base64_values.append(Base64Value(data=b"\xff" * 200))
    assert serialize_message(msg) == line


def test_a_placeholder_a_go_program_writes_takes_its_text() -> None:
    """How a Go program writes such a record itself: the placeholder where
    the text goes, the entry in base64_values."""
    line = reasoning_line({"id": "rs_1", "list": ["", "x"]})
    msg = parse_message(line)
    msg.thinking.fidelity["list"][0] = placeholder(0, b"ab")
    msg.base64_values.append(Base64Value(data=b"ab"))
    assert b'"list":["YWI=","x"]' in serialize_message(msg)
    msg.base64_values[0].url_safe = True
    msg.base64_values[0].prefix = "data:,"
    msg.base64_values[0].data = b"\xfb\xff"
    msg.thinking.fidelity["list"][0] = placeholder(0, b"\xfb\xff")
    assert b'"list":["data:,-_8=","x"]' in serialize_message(msg)


@pytest.mark.parametrize(
    "fidelity",
    [
        {"\ud800": 1, "encrypted_content": SECRET},  # a key with a lone surrogate
        {"deep": functools.reduce(lambda inner, _: [inner], range(20), 1), "id": SECRET},
    ],
    ids=["surrogate-key", "below-the-view"],
)
def test_a_fidelity_kept_as_its_exact_text_is_stored_once(fidelity: dict[str, object]) -> None:
    """Issue 45: a fidelity kept as fidelity_json (a key with a lone
    surrogate, nesting below the view) was stored twice, its Struct view
    beside the text (up to 1.97x the line). The default form leaves the view
    out for a marker and builds it again as it reads; a program that sets a
    key beside the marker edits that key, and a marker without the text is
    refused."""
    line = reasoning_line(fidelity)
    msg = parse_message(line)
    assert msg.thinking.fidelity_json
    (body,) = frames(to_binpb([line]))
    assert len(body) < len(line)  # once: it was len(msg.SerializeToString()), nearly twice
    assert len(msg.SerializeToString()) > 1.5 * len(line)
    stored = OmniMessage.FromString(body)
    assert list(stored.thinking.fidelity) == [ELIDED]
    assert back(to_binpb([line])) == [line]
    assert serialize_message(stored) == line  # a relay that never unpacked
    stored.thinking.fidelity["id"] = "edited"
    assert loads(serialize_message(stored))["payload"]["fidelity"] == {
        **loads(line)["payload"]["fidelity"],
        "id": "edited",
    }
    stored.thinking.fidelity_json = ""
    with pytest.raises(ConversionError, match="left out for fidelity_json, which is empty"):
        serialize_message(stored)


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
