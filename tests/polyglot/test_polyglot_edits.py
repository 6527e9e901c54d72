"""Edits made in Go win, and only the edited part changes.

Python writes JSON lines as a .binpb; examples/go/cmd/omni-edit parses each
record with proto.Unmarshal's defaults, edits the typed fields the way Go code
does (set a field to nil, prepend to a slice, set one Struct key, set an enum
number) and writes the records again; Python then writes JSON from what came
back. Clearing a field gives absence, the parts not edited keep their exact
bytes, and messages Go and Java build from typed fields alone (no envelope
type, no hints) convert both ways with identical protobuf bytes.
"""

from __future__ import annotations

import base64
import io
import subprocess
import sys
from pathlib import Path

import pytest

from omni_grpc.convert import parse_message, serialize_message
from omni_grpc.trace import read_binpb, write_binpb
from polyglot.polyglot_builds import GoBuild, build_java

T = '"timestamp":"2026-01-02T03:04:05.678Z"'


def go_edit(go_build: GoBuild, ops: list[str], lines: list[str]) -> list[str]:
    sink = io.BytesIO()
    write_binpb((parse_message(line) for line in lines), sink)
    done = subprocess.run(
        [str(go_build.edit), *ops],
        input=sink.getvalue(),
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    return [serialize_message(r.message).decode() for r in read_binpb(io.BytesIO(done.stdout))]


# (ops, line before, line after): keys out of order everywhere, so each
# message carries a key list naming the key the edit clears.
EDITS = [
    (
        ["clear-fidelity"],
        f'{{"type":"model_msg",{T},"payload":{{"fidelity":{{"b":1,"a":[2]}},"type":"text",'
        '"role":"assistant","text":"x"}}',
        f'{{"type":"model_msg",{T},"payload":{{"type":"text","role":"assistant","text":"x"}}}}',
    ),
    (
        ["clear-origin"],
        f'{{"origin":["child"],"type":"event_msg",{T},"payload":{{"type":"request_begin"}}}}',
        f'{{"type":"event_msg",{T},"payload":{{"type":"request_begin"}}}}',
    ),
    (
        ["clear-images"],
        f'{{{T},"type":"model_msg","payload":{{"images":["data:image/png;base64,AA=="],'
        '"type":"tool_call_output","role":"user","output":"o","tool_call_id":"c"}}',
        f'{{{T},"type":"model_msg","payload":{{"type":"tool_call_output","role":"user",'
        '"output":"o","tool_call_id":"c"}}',
    ),
    (
        ["clear-tools"],
        f'{{{T},"type":"session_meta","payload":{{"session_id":"s","provider":"p","model_id":"m",'
        '"model_context_window":1,"system_prompt":"","tools":[{"name":"t","description":"d"}],'
        '"thinking_level":"default","agent_state":"a","workspace":"w"}}',
        f'{{{T},"type":"session_meta","payload":{{"session_id":"s","provider":"p","model_id":"m",'
        '"model_context_window":1,"system_prompt":"","thinking_level":"default","agent_state":"a",'
        '"workspace":"w"}}',
    ),
    (
        ["prepend-origin=parent"],
        f'{{{T},"type":"event_msg","payload":{{"type":"request_begin"}},'
        '"origin":["a\\ud800","b\\udfff"]}',
        f'{{{T},"type":"event_msg","payload":{{"type":"request_begin"}},'
        '"origin":["parent","a\\ud800","b\\udfff"]}',
    ),
    (
        ['set-fidelity=phase="b"'],
        f'{{{T},"type":"model_msg","payload":{{"type":"text","role":"assistant","text":"x",'
        '"fidelity":{"zeta":9007199254740993,"phase":"a","alpha":[1,{"y":1e+21,"x":2}]}}}',
        f'{{{T},"type":"model_msg","payload":{{"type":"text","role":"assistant","text":"x",'
        '"fidelity":{"zeta":9007199254740993,"phase":"b","alpha":[1,{"y":1e+21,"x":2}]}}}',
    ),
    (
        ["set-stop-reason=42"],
        f'{{{T},"type":"model_msg","payload":{{"type":"text","role":"assistant","text":"x",'
        '"stop_reason":"completed"}}',
        f'{{{T},"type":"model_msg","payload":{{"type":"text","role":"assistant","text":"x",'
        '"stop_reason":42}}',
    ),
]


@pytest.mark.parametrize(("ops", "before", "after"), EDITS, ids=[e[0][0] for e in EDITS])
def test_a_go_edit_changes_only_what_it_edits(
    go_build: GoBuild, ops: list[str], before: str, after: str
) -> None:
    assert serialize_message(parse_message(before)).decode() == before  # lossless unedited
    [edited] = go_edit(go_build, ops, [before])
    assert edited == after
    # What Go wrote converts on losslessly, the enum number from a newer schema too.
    again = parse_message(edited)
    assert serialize_message(again).decode() == after


def test_no_edit_is_lossless_through_go(go_build: GoBuild) -> None:
    lines = [before for _, before, _ in EDITS]
    assert go_edit(go_build, [], lines) == lines


def test_messages_built_in_go_are_identity_both_ways(go_build: GoBuild) -> None:
    done = subprocess.run(
        [str(go_build.edit), "build"], capture_output=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr.decode()
    built = [r.message for r in read_binpb(io.BytesIO(done.stdout))]
    lines = [serialize_message(m).decode() for m in built]
    assert lines == [
        f'{{{T},"type":"session_meta","payload":{{"session_id":"go-1","provider":"p",'
        '"model_id":"m","model_context_window":200000,"system_prompt":"","agent_state":"/a",'
        '"workspace":"/w"}}',
        f'{{{T},"type":"model_msg","payload":{{"type":"text","role":"assistant",'
        '"text":"built in Go","stop_reason":"completed","fidelity":{"alpha":[1.5,"x"],"zeta":1}}}',
        f'{{{T},"type":"event_msg","payload":{{"type":"tool_list_ready","tools":[{{"name":"ls",'
        '"description":"list","parameters":{"type":"object","properties":{"path":'
        '{"type":"string"}}}}]}}',
        f'{{{T},"type":"event_msg","payload":{{"type":"token_usage","session":{{"cache_read":0,'
        '"cache_write":0,"output":0,"total":0},"request":{"cache_read":0,"cache_write":0,'
        '"output":3,"total":3}},"origin":["child"]}',
        f'{{{T},"type":"event_msg","payload":{{"type":"abort","reason":null}}}}',
    ]
    for message, line in zip(built, lines, strict=True):
        back = parse_message(line)
        assert back.SerializeToString(deterministic=True) == message.SerializeToString(
            deterministic=True
        )


def test_the_pipeline_docs_polyglot_shows(go_build: GoBuild, tmp_path: Path) -> None:
    """docs/polyglot.md: omni-edit with three ops, then omni-grpc convert."""
    doc = (Path(__file__).parents[2] / "docs" / "polyglot.md").read_text()
    ops = ['set-fidelity=phase="b"', "prepend-origin=parent", "clear-images"]
    assert "omni-edit 'set-fidelity=phase=\"b\"' prepend-origin=parent clear-images <" in doc
    line = (
        f'{{{T},"type":"model_msg","payload":{{"type":"text","role":"assistant","text":"x",'
        '"fidelity":{"z":1,"phase":"a"}},"origin":["child"]}'
    )
    source = tmp_path / "in.binpb"
    sink = io.BytesIO()
    write_binpb([parse_message(line)], sink)
    source.write_bytes(sink.getvalue())
    with source.open("rb") as stdin, (tmp_path / "out.binpb").open("wb") as stdout:
        subprocess.run([str(go_build.edit), *ops], stdin=stdin, stdout=stdout, check=True)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "omni_grpc",
            "convert",
            tmp_path / "out.binpb",
            tmp_path / "o.jsonl",
        ],
        check=True,
        capture_output=True,
    )
    # clear-images finds no images on a text; the other two change only their part.
    assert (tmp_path / "o.jsonl").read_text() == (
        f'{{{T},"type":"model_msg","payload":{{"type":"text","role":"assistant","text":"x",'
        '"fidelity":{"z":1,"phase":"b"}},"origin":["parent","child"]}\n'
    )


def test_messages_built_in_java_are_identity_both_ways() -> None:
    java = build_java()
    done = subprocess.run([*java, "build"], capture_output=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr.decode()
    built = [r.message for r in read_binpb(io.BytesIO(done.stdout))]
    lines = [serialize_message(m).decode() for m in built]
    assert lines == [
        f'{{{T},"type":"model_msg","payload":{{"type":"text","role":"assistant",'
        '"text":"built in Java","stop_reason":"completed","fidelity":{"alpha":[1.5,"x"],'
        '"zeta":1}}}',
        f'{{{T},"type":"event_msg","payload":{{"type":"tool_list_ready","tools":[{{"name":"ls",'
        '"description":"list","parameters":{"type":"object","properties":{}}}]}}',
        f'{{{T},"type":"event_msg","payload":{{"type":"token_usage","session":{{"cache_read":0,'
        '"cache_write":0,"output":0,"total":0},"request":{"cache_read":0,"cache_write":0,'
        '"output":3,"total":3}},"origin":["child"]}',
        f'{{{T},"type":"event_msg","payload":{{"type":"abort","reason":null}}}}',
    ]
    for message, line in zip(built, lines, strict=True):
        back = parse_message(line)
        assert back.SerializeToString(deterministic=True) == message.SerializeToString(
            deterministic=True
        )


# ---- where an added key goes (issue 28; docs/lossless.md "Where an added key goes") ----


def edited_by(program: list[str], ops: list[str], records: bytes) -> list[str]:
    """``records`` (a .binpb) edited by a Go or Java program, as JSON lines."""
    done = subprocess.run(
        [*program, *ops], input=records, capture_output=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr.decode()
    return [serialize_message(r.message).decode() for r in read_binpb(io.BytesIO(done.stdout))]


# What the reference's JavaScript does for the same edit: assignment appends a
# key an object lacks, and keeps the place of one it has.
JS_EDIT = """
const [line, edit] = process.argv.slice(1);
const msg = JSON.parse(line);
const [key, value] = JSON.parse(edit);
if (key === "stop_reason") msg.payload.stop_reason = value;
else msg.payload.fidelity[key] = value;
process.stdout.write(JSON.stringify(msg));
"""


def js_edit(line: str, key: str, value: object) -> str:
    done = subprocess.run(
        ["node", "-e", JS_EDIT, line, __import__("json").dumps([key, value])],
        capture_output=True,
        timeout=60,
        check=True,
    )
    return done.stdout.decode()


P = f'{{{T},"type":"model_msg","payload":'
B64 = base64.b64encode(bytes(range(200))).decode()  # stored as bytes by default
# (name, line, key, value, op, what we write, whether that is what JavaScript writes)
PLACEMENTS = [
    (
        "fidelity-with-key-list",  # unsorted keys: the message lists them
        P + '{"type":"text","role":"assistant","text":"x","stop_reason":"completed",'
        '"fidelity":{"signature":"s","alpha":1}}}',
        "enc",
        "go",
        'set-fidelity=enc="go"',
        P + '{"type":"text","role":"assistant","text":"x","stop_reason":"completed",'
        '"fidelity":{"signature":"s","alpha":1,"enc":"go"}}}',
        True,
    ),
    (
        "fidelity-json-of-an-old-file",  # old files: fidelity_json lists them
        "",  # built below from tests/data
        "enc",
        "go",
        'set-fidelity=enc="go"',
        '{"timestamp":"2026-08-22T02:15:30.000Z","type":"model_msg","payload":{"type":'
        '"thinking","role":"assistant","thinking":"","stop_reason":"completed","fidelity":'
        '{"id":"rs_0a1b","encrypted_content":"gAAAAABo","enc":"go"}}}',
        True,
    ),
    (
        "payload-with-key-list",  # keys out of builder order: the message lists them
        P + '{"fidelity":{"phase":"a"},"type":"text","role":"assistant","text":"x"}}',
        "stop_reason",
        "completed",
        "set-stop-reason=1",
        P + '{"fidelity":{"phase":"a"},"type":"text","role":"assistant","text":"x",'
        '"stop_reason":"completed"}}',
        True,
    ),
    (
        # the default .binpb form: the blob is base64_values, a placeholder in the Struct
        "fidelity-with-base64-as-bytes",
        P + '{"type":"thinking","role":"assistant","thinking":"","stop_reason":"completed",'
        f'"fidelity":{{"id":"rs_1","encrypted_content":"{B64}"}}}}}}',
        "enc",
        "go",
        'set-fidelity=enc="go"',
        P + '{"type":"thinking","role":"assistant","thinking":"","stop_reason":"completed",'
        f'"fidelity":{{"id":"rs_1","encrypted_content":"{B64}","enc":"go"}}}}}}',
        True,
    ),
    (
        "base64-as-bytes-edited",  # an edit of the value itself wins over its hint
        P + '{"type":"thinking","role":"assistant","thinking":"","stop_reason":"completed",'
        f'"fidelity":{{"id":"rs_1","encrypted_content":"{B64}"}}}}}}',
        "encrypted_content",
        "go",
        'set-fidelity=encrypted_content="go"',
        P + '{"type":"thinking","role":"assistant","thinking":"","stop_reason":"completed",'
        '"fidelity":{"id":"rs_1","encrypted_content":"go"}}}',
        True,
    ),
    (
        "sorted-fidelity",  # reference form: no record of its keys, sorted position
        P + '{"type":"text","role":"assistant","text":"x","stop_reason":"completed",'
        '"fidelity":{"signature":"s"}}}',
        "enc",
        "go",
        'set-fidelity=enc="go"',
        P + '{"type":"text","role":"assistant","text":"x","stop_reason":"completed",'
        '"fidelity":{"enc":"go","signature":"s"}}}',
        False,
    ),
    (
        "reference-form-payload",  # builder order: no record of its keys, builder position
        P + '{"type":"text","role":"assistant","text":"x","fidelity":{"phase":"a"}}}',
        "stop_reason",
        "completed",
        "set-stop-reason=1",
        P + '{"type":"text","role":"assistant","text":"x","stop_reason":"completed",'
        '"fidelity":{"phase":"a"}}}',
        False,
    ),
]


def _placement_source(line: str) -> tuple[str, bytes]:
    """The line and its .binpb record: written now, or (no line given) the
    record the codec wrote before issue 28, which holds fidelity_json."""
    if line:
        sink = io.BytesIO()
        write_binpb([parse_message(line)], sink)
        return line, sink.getvalue()
    data = Path(__file__).parents[1] / "data" / "fidelity_json_0_2_0"
    records = list(read_binpb(io.BytesIO(data.with_suffix(".binpb").read_bytes())))
    [record] = [r for r in records if r.message.thinking.fidelity_json]
    sink = io.BytesIO()
    write_binpb([record.message], sink)
    return serialize_message(record.message).decode(), sink.getvalue()


@pytest.mark.parametrize(
    ("name", "line", "key", "value", "op", "after", "as_js"),
    PLACEMENTS,
    ids=[p[0] for p in PLACEMENTS],
)
def test_an_added_key_goes_where_the_rule_says_in_go_and_java(
    go_build: GoBuild,
    name: str,
    line: str,
    key: str,
    value: object,
    op: str,
    after: str,
    as_js: bool,
) -> None:
    """A key added to an object that lists its keys is appended, as
    JavaScript's assignment appends; an object in reference form keeps no
    record of which keys it had (what lets a message built in Go convert to
    JSON and back to identical bytes), so an added key takes its reference
    place there, which JavaScript's differs from."""
    line, record = _placement_source(line)
    assert serialize_message(parse_message(line)).decode() == line
    if B64 in line:  # the record is in the default form Go and Java read
        assert B64.encode() not in record and b"\x00base64:0:" in record  # its placeholder
    assert edited_by([str(go_build.edit)], [op], record) == [after]
    assert edited_by([*build_java(), "edit"], [op], record) == [after]
    javascript = js_edit(line, key, value)
    assert (javascript == after) is as_js, javascript
    again = parse_message(after)  # and what was written stays that way
    assert serialize_message(again).decode() == after
