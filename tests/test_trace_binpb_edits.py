"""Edits through the generated stubs of a default-form ``.binpb`` record
(issue 45): a program that removes, inserts, reorders, copies or renames
values of ``fidelity`` or a tool output's images, knowing nothing of
``base64_values``, gets what JavaScript gives for the same edit of the JSON
(node is the oracle, tests/js/edit_oracle.mjs), or a loud error; never a
stored value put back at the wrong place. Also keys that differ only in
lone surrogates (one key in the Struct) and hints the reader refuses.
"""

from __future__ import annotations

import base64
import copy
import io
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import struct_pb2
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from omni_grpc.convert import ConversionError, parse_message, serialize_message
from omni_grpc.convert._jsontext import dump_value, scrub_surrogates
from omni_grpc.trace import read_binpb, write_binpb
from omni_grpc.trace.binpb import encode_varint
from omni_grpc.trace.convert import binpb_to_jsonl, jsonl_to_binpb
from omni_grpc_proto.omni.v1.omni_pb2 import Base64Value, OmniMessage

HERE = Path(__file__).parent
NODE = shutil.which("node")
needs_node = pytest.mark.skipif(
    NODE is None and not os.environ.get("OMNI_REQUIRE_TOOLCHAINS"),
    reason="node is not installed",
)
T = '{"timestamp":"2026-01-02T03:04:05.000Z","type":"model_msg","payload":'


class Oracle:
    """One node process applying edits as JavaScript does."""

    def __init__(self) -> None:
        assert NODE is not None
        self.proc = subprocess.Popen(
            [NODE, str(HERE / "js" / "edit_oracle.mjs")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )

    def __call__(self, line: bytes, ops: list[list[Any]]) -> bytes:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        request = json.dumps({"line": line.decode(), "ops": ops}) + "\n"
        try:
            self.proc.stdin.write(request.encode())
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise AssertionError("the node oracle exited") from None
        answer = self.proc.stdout.readline()
        assert answer, f"the node oracle exited on {request}"
        out: str = json.loads(answer)["out"]
        return out.encode("utf-8", "surrogatepass")

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def oracle() -> Iterator[Oracle]:
    js = Oracle()
    yield js
    js.close()


def frames(data: bytes) -> list[bytes]:
    from google.protobuf.internal.decoder import _DecodeVarint

    out, pos = [], 0
    while pos < len(data):
        length, pos = _DecodeVarint(data, pos)
        out.append(data[pos : pos + length])
        pos += length
    return out


def default_form(line: bytes, *, plain: bool = False) -> OmniMessage:
    """The record as a stub program reads it from a default .binpb."""
    sink = io.BytesIO()
    write_binpb([parse_message(line)], sink, plain=plain)
    (body,) = frames(sink.getvalue())
    return OmniMessage.FromString(body)


def read_back(msg: OmniMessage) -> bytes:
    """The record, written back by the stub program, read by ours: the
    record-at-a-time reader and the batch converter must agree."""
    body = msg.SerializeToString()
    data = encode_varint(len(body)) + body
    (record,) = read_binpb(io.BytesIO(data))
    line = serialize_message(record.message)
    out = io.BytesIO()
    binpb_to_jsonl(io.BytesIO(data), out)
    assert out.getvalue() == line + b"\n"
    return line


# ---- a stub program's edits: protobuf API only ------------------------------


def _python_value(value: Any) -> struct_pb2.Value:
    holder = struct_pb2.Struct()
    holder.update({"v": value})
    return holder.fields["v"]


def _container(payload: Any, path: list[Any]) -> Any:
    """The Struct, ListValue or repeated field ``path`` names."""
    if path[0] != "fidelity":
        (name,) = path
        return getattr(payload, name)
    node: Any = payload.fidelity
    for part in path[1:]:
        value = node.fields[part] if isinstance(node, struct_pb2.Struct) else node.values[part]
        node = value.struct_value if value.HasField("struct_value") else value.list_value
    return node


def _value_at(payload: Any, path: list[Any]) -> struct_pb2.Value:
    parent = _container(payload, path[:-1])
    if isinstance(parent, struct_pb2.Struct):
        return parent.fields[path[-1]]
    return parent.values[path[-1]]


def _set_items(items: Any, new: list[Any]) -> None:
    del items[:]
    items.extend(new)


def stub_edit(msg: OmniMessage, ops: list[list[Any]]) -> None:
    arm = msg.WhichOneof("payload")
    assert arm is not None
    payload = getattr(msg, arm)
    for op in ops:
        kind, path = op[0], op[1]
        node = _container(payload, op[2] if kind == "copy" else path)
        items: list[Any] | None = None
        if isinstance(node, struct_pb2.ListValue):
            items = [copy.deepcopy(v) for v in node.values]
        elif not isinstance(node, struct_pb2.Struct):
            items = list(node)  # a repeated string field
        target = node.values if isinstance(node, struct_pb2.ListValue) else node
        if kind == "remove":
            assert items is not None
            del items[op[2]]
            _set_items(target, items)
        elif kind == "insert":
            assert items is not None
            new = _python_value(op[3]) if isinstance(node, struct_pb2.ListValue) else op[3]
            items.insert(op[2], new)
            _set_items(target, items)
        elif kind == "move":
            assert items is not None
            items.insert(op[3], items.pop(op[2]))
            _set_items(target, items)
        elif kind == "rename":
            value = struct_pb2.Value()
            value.CopyFrom(node.fields[op[2]])
            del node.fields[op[2]]
            node.fields[op[3]].CopyFrom(value)
        elif kind == "delete":
            del node.fields[op[2]]
        elif kind == "copy":
            value = struct_pb2.Value()
            value.CopyFrom(_value_at(payload, op[1]))
            node.fields[op[3]].CopyFrom(value)
        elif kind == "set":
            node.fields[op[2]].CopyFrom(_python_value(op[3]))
        else:
            raise AssertionError(kind)


def mirror_edit(obj: Any, ops: list[list[Any]]) -> None:
    """The same edits on the parsed JSON, to draw the next op from."""
    for op in ops:
        kind = op[0]
        node = obj
        for part in op[2] if kind == "copy" else op[1]:
            node = node[part]
        if kind == "remove":
            del node[op[2]]
        elif kind == "insert":
            node.insert(op[2], copy.deepcopy(op[3]))
        elif kind == "move":
            node.insert(op[3], node.pop(op[2]))
        elif kind == "rename":
            node[op[3]] = node.pop(op[2])
        elif kind == "delete":
            del node[op[2]]
        elif kind == "copy":
            source = obj
            for part in op[1]:
                source = source[part]
            node[op[3]] = copy.deepcopy(source)
        elif kind == "set":
            node[op[2]] = copy.deepcopy(op[3])


# ---- what to edit -----------------------------------------------------------

KEYS = st.sampled_from(["a", "b", "sig", "data", "x/y", "t~0", "id"])
BLOB = st.tuples(st.binary(min_size=96, max_size=180), st.booleans()).map(
    lambda t: (base64.urlsafe_b64encode if t[1] else base64.b64encode)(t[0]).decode()
)
SCALAR = st.one_of(BLOB, BLOB, st.text(max_size=6), st.integers(-99, 99), st.booleans(), st.none())
VALUE = st.recursive(
    SCALAR,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(KEYS, inner, max_size=4)),
    max_leaves=10,
)
FIDELITY = st.dictionaries(KEYS, VALUE, min_size=1, max_size=4)


def containers(value: Any, path: list[Any]) -> Iterator[tuple[list[Any], Any]]:
    if isinstance(value, (dict, list)):
        yield path, value
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            yield from containers(item, [*path, key])


def values(value: Any, path: list[Any]) -> Iterator[list[Any]]:
    yield path
    if isinstance(value, (dict, list)):
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            yield from values(item, [*path, key])


@st.composite
def edits(draw: st.DrawFn, payload: dict[str, Any], root: str) -> list[list[Any]]:
    """One to three edits of ``payload[root]``, each drawn from the value as
    the edits before it left it."""
    state = copy.deepcopy(payload)
    ops: list[list[Any]] = []
    for _ in range(draw(st.integers(1, 3))):
        path, node = draw(st.sampled_from(list(containers(state[root], [root]))))
        if isinstance(node, list):
            choices = ["insert"] + (["remove", "move"] if node else [])
            kind = draw(st.sampled_from(choices))
            item = BLOB if root == "images" else VALUE
            if kind == "insert":
                op = [kind, path, draw(st.integers(0, len(node))), draw(item)]
            elif kind == "remove":
                op = [kind, path, draw(st.integers(0, len(node) - 1))]
            else:
                op = [kind, path, draw(st.integers(0, len(node) - 1))]
                op.append(draw(st.integers(0, len(node) - 1)))
        else:
            kind = draw(st.sampled_from(["set", "copy"] + (["rename", "delete"] if node else [])))
            if kind == "rename":
                op = [kind, path, draw(st.sampled_from(sorted(node))), draw(KEYS)]
            elif kind == "delete":
                op = [kind, path, draw(st.sampled_from(sorted(node)))]
            elif kind == "set":
                op = [kind, path, draw(KEYS), draw(VALUE)]
            else:
                sources = [p for p in values(state[root], [root]) if len(p) > 1]
                if not sources:
                    continue
                source = draw(st.sampled_from(sources))
                if path[: len(source)] == source:
                    continue  # a value copied into itself: no JavaScript counterpart worth it
                op = [kind, source, path, draw(KEYS)]
        mirror_edit(state, [op])
        ops.append(op)
    return ops


def agree(ours: bytes, theirs: bytes) -> None:
    """The same JSON value (a key a Struct gains takes its sorted place,
    docs/lossless.md; every value must be where JavaScript puts it)."""
    assert json.loads(ours) == json.loads(theirs), (ours, theirs)


@needs_node
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(FIDELITY, st.sampled_from(["thinking", "text", "tool_call"]), st.data())
def test_stub_edits_of_fidelity_give_what_javascript_gives(
    oracle: Oracle, fidelity: dict[str, Any], arm: str, data: st.DataObject
) -> None:
    payload: dict[str, Any] = {"type": arm, "role": "assistant"}
    if arm == "tool_call":
        payload |= {"name": "f", "arguments": "{}", "tool_call_id": "c"}
    else:
        payload[arm] = ""
    payload["fidelity"] = fidelity
    line = dump_value(json.loads(T + "null}") | {"payload": payload}).encode()
    ops = data.draw(edits(payload, "fidelity"))
    want = oracle(line, ops)
    for plain in (False, True):
        msg = default_form(line, plain=plain)
        stub_edit(msg, ops)
        agree(read_back(msg), want)


IMAGES = st.lists(
    st.one_of(BLOB, BLOB.map(lambda b: "data:image/png;base64," + b), st.text(max_size=5)),
    min_size=1,
    max_size=5,
)


@needs_node
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(IMAGES, st.data())
def test_stub_edits_of_images_give_what_javascript_gives(
    oracle: Oracle, images: list[str], data: st.DataObject
) -> None:
    payload = {
        "type": "tool_call_output",
        "role": "user",
        "output": "o",
        "images": images,
        "tool_call_id": "c",
    }
    line = dump_value(json.loads(T + "null}") | {"payload": payload}).encode()
    # the batch converter (native where it can) stores them as write_binpb does
    sink, single = io.BytesIO(), io.BytesIO()
    jsonl_to_binpb(io.BytesIO(line + b"\n"), sink)
    write_binpb([parse_message(line)], single)
    assert sink.getvalue() == single.getvalue()
    ops = data.draw(edits(payload, "images"))
    msg = default_form(line)
    stub_edit(msg, ops)
    want = json.loads(oracle(line, ops))
    if want["payload"]["images"] == []:
        del want["payload"]["images"]  # a repeated field emptied is absent (docs/lossless.md)
    assert json.loads(read_back(msg)) == want


def test_the_issue_examples() -> None:
    """Issue 45's cases: delete blocks[0] of [X, Y] reads back [Y]; a
    renamed key keeps its value."""
    x, y = (base64.b64encode(bytes([n]) * 150).decode() for n in (1, 2))
    line = (
        T + '{"type":"thinking","role":"assistant","thinking":"",'
        f'"fidelity":{{"blocks":["{x}","{y}"],"signature":"{x}"}}}}}}'
    ).encode()
    msg = default_form(line)
    assert msg.base64_values
    del msg.thinking.fidelity["blocks"].values[0]
    assert json.loads(read_back(msg))["payload"]["fidelity"]["blocks"] == [y]
    msg = default_form(line)
    value = struct_pb2.Value()
    value.CopyFrom(msg.thinking.fidelity.fields["signature"])
    del msg.thinking.fidelity["signature"]
    msg.thinking.fidelity.fields["sig"].CopyFrom(value)
    assert json.loads(read_back(msg))["payload"]["fidelity"]["sig"] == x


@pytest.mark.parametrize("path", ["/payload/fidelity/a~2b", "/payload/fidelity/x", "~", ""])
def test_a_hint_with_a_path_is_refused(path: str) -> None:
    """The pre-release form (a JSON Pointer and "" in the Struct) could not
    follow an edit; a record holding it is refused, whatever the pointer,
    and an invalid one (``~2``) is never matched literally."""
    line = (
        T + '{"type":"thinking","role":"assistant","thinking":"","fidelity":{"a~2b":"","x":""}}}'
    ).encode()
    msg = parse_message(line)
    msg.base64_values.append(Base64Value(path=path or "/", data=b"\xff" * 200))
    body = msg.SerializeToString()
    with pytest.raises(ConversionError, match="has a path"):
        list(read_binpb(io.BytesIO(encode_varint(len(body)) + body)))
    with pytest.raises(ConversionError, match="has a path"):
        serialize_message(msg)


def thinking_line(fidelity: dict[str, Any]) -> bytes:
    payload = {"type": "thinking", "role": "assistant", "thinking": "", "fidelity": fidelity}
    return dump_value(json.loads(T + "null}") | {"payload": payload}).encode()


def test_a_placeholder_from_another_record_is_refused() -> None:
    blob = base64.b64encode(b"\x07" * 120).decode()
    other = base64.b64encode(b"\x08" * 120).decode()
    moved = default_form(thinking_line({"s": other}))
    msg = default_form(thinking_line({"s": blob}))
    msg.thinking.fidelity["t"] = moved.thinking.fidelity["s"]
    with pytest.raises(ConversionError, match="/payload/fidelity/t: a base64 placeholder's CRC"):
        read_back(msg)


def test_a_value_that_looks_like_a_placeholder_is_never_rewritten() -> None:
    blob = base64.b64encode(b"\x07" * 120).decode()
    fidelity = {"s": blob, "p": "\x00base64:0:00000000"}
    line = dump_value(
        json.loads(T + "null}")
        | {
            "payload": {
                "type": "thinking",
                "role": "assistant",
                "thinking": "",
                "fidelity": fidelity,
            }
        }
    ).encode()
    msg = default_form(line)
    assert not msg.base64_values  # the record is kept as text
    assert read_back(msg) == line


# ---- keys that are one key in the Struct -------------------------------------

COLLIDING = [("k\ud800", "k\udc00"), ("k\ud800", "k\ufffd"), ("\udfff", "\ufffd", "\ud800")]


def surrogate_line(keys: tuple[str, ...]) -> bytes:
    fidelity: dict[str, Any] = {key: n for n, key in enumerate(keys, 1)}
    fidelity["other"] = "o"
    payload = {"type": "thinking", "role": "assistant", "thinking": "", "fidelity": fidelity}
    return dump_value(json.loads(T + "null}") | {"payload": payload}).encode()


@pytest.mark.parametrize("keys", COLLIDING)
def test_colliding_keys_survive_an_edit_elsewhere(keys: tuple[str, ...]) -> None:
    """An edit of another key keeps every colliding key and its value, as
    JavaScript's assignment would (and as the issue requires)."""
    line = surrogate_line(keys)
    for msg in (parse_message(line), default_form(line)):
        assert msg.thinking.fidelity_json
        msg.thinking.fidelity["other"] = "edited"
        msg.thinking.fidelity["new"] = True
        got = json.loads(serialize_message(msg))["payload"]["fidelity"]
        want = json.loads(line)["payload"]["fidelity"] | {"other": "edited", "new": True}
        assert got == want
        assert list(got)[: len(keys)] == list(keys)


@pytest.mark.parametrize("keys", COLLIDING)
@pytest.mark.parametrize("edit", ["set", "delete"])
def test_an_edit_of_a_key_that_stands_for_several_is_refused(
    keys: tuple[str, ...], edit: str
) -> None:
    line = surrogate_line(keys)
    # The default form leaves the view out (the text is kept once), so a key
    # to delete is in the plain form's Struct; setting one works on both.
    msg = default_form(line, plain=edit == "delete")
    viewed = "k\ufffd" if keys[0].startswith("k") else "\ufffd"
    if edit == "set":
        msg.thinking.fidelity[viewed] = 42
    else:
        del msg.thinking.fidelity[viewed]
    with pytest.raises(ConversionError, match="stands for"):
        read_back(msg)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.sampled_from(["k\ud800", "k\udc00", "k\ufffd", "k", "\ud83d"]),
        min_size=2,
        max_size=4,
        unique=True,
    ),
    st.sampled_from(["none", "other", "colliding", "delete"]),
)
def test_surrogate_keys_never_lose_a_key_silently(keys: list[str], edit: str) -> None:
    """Whatever the keys: the read gives every source key (edited where the
    edit named it without ambiguity), or refuses."""
    line = surrogate_line(tuple(keys))
    source = json.loads(line)["payload"]["fidelity"]
    msg = default_form(line, plain=edit == "delete")  # (see the test above)
    fidelity = msg.thinking.fidelity
    target = sorted({scrub_surrogates(key) for key in keys})[0]  # a key the view shows
    if edit == "other":
        fidelity["other"] = "edited"
        source["other"] = "edited"
    elif edit == "colliding":
        fidelity[target] = 42
    elif edit == "delete":
        del fidelity[target]
    try:
        got = json.loads(read_back(msg))["payload"]["fidelity"]
    except ConversionError as exc:
        assert "stands for" in str(exc)
        assert edit in ("colliding", "delete")
        return
    if edit in ("none", "other"):
        assert got == source
    else:
        # the Struct key stood for one source key alone: JavaScript's edit
        stood = [k for k in source if scrub_surrogates(k) == target]
        assert len(stood) == 1
        if edit == "colliding":
            source[stood[0]] = 42
        else:
            del source[stood[0]]
        assert got == source
