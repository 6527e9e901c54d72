"""The lossless contract's edges: the schema's one source of truth for the
envelope type, absence versus empty, enum numbers from newer schemas, edits
that change only the edited part, and hints that cannot forge content."""

from __future__ import annotations

import pytest

from omni_grpc.convert import ConversionError, parse_message, serialize_message
from omni_grpc.convert._jsontext import loads
from omni_grpc.convert._schema import ENVELOPE_TYPE_OF_ARM
from omni_grpc.protocol import guards
from omni_grpc_proto.omni.v1 import omni_pb2

T = '"timestamp":"2026-08-22T02:15:30.000Z"'


def identity(msg: omni_pb2.OmniMessage) -> omni_pb2.OmniMessage:
    """proto -> JSON -> proto, asserting the bytes survive."""
    again = parse_message(serialize_message(msg))
    assert again.SerializeToString(deterministic=True) == msg.SerializeToString(deterministic=True)
    return again


# ---- the envelope type ------------------------------------------------------


def test_the_arm_table_covers_the_proto_and_agrees_with_the_vocabulary() -> None:
    arms = {f.name for f in omni_pb2.OmniMessage.DESCRIPTOR.oneofs_by_name["payload"].fields}
    assert set(ENVELOPE_TYPE_OF_ARM) == arms - {"unknown"}
    for arm, kind in ENVELOPE_TYPE_OF_ARM.items():
        if arm == "session_meta":
            assert kind == "session_meta"
        elif arm in guards.EVENT_KINDS:
            assert kind == "event_msg", arm
        else:
            assert arm in guards.COMPLETE_MODEL_KINDS | guards.PARTIAL_KINDS, arm
            assert kind == "model_msg", arm


@pytest.mark.parametrize("arm", sorted(ENVELOPE_TYPE_OF_ARM))
def test_messages_built_without_a_type_are_identity(arm: str) -> None:
    msg = omni_pb2.OmniMessage(timestamp="2026-01-01T00:00:00.000Z")
    getattr(msg, arm).SetInParent()
    text = serialize_message(msg)
    assert loads(text)["type"] == ENVELOPE_TYPE_OF_ARM[arm]
    identity(msg)


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (
            f'{{{T},"type":"event_msg","payload":{{"type":"text","role":"user","text":"x"}}}}',
            "/type: a text payload travels in a model_msg envelope",
        ),
        (
            f'{{{T},"type":"debug_msg","payload":{{"type":"abort","reason":null}}}}',
            "/type: a abort payload travels in a event_msg envelope",
        ),
        (
            f'{{{T},"type":"model_msg","payload":{{"session_id":"s"}}}}',
            "/payload/type: missing the payload type",
        ),
        (f'{{{T},"payload":{{"type":"request_begin"}}}}', "/type: missing the envelope type"),
        ('{"type":"event_msg","payload":{"type":"request_begin"}}', "/timestamp: missing"),
    ],
)
def test_an_envelope_type_that_contradicts_its_payload_is_refused(line: str, reason: str) -> None:
    with pytest.raises(ConversionError) as caught:
        parse_message(line, line=4)
    assert str(caught.value).startswith(f"line 4: {reason}")


def test_unknown_payloads_keep_their_envelope_type_and_must_be_consistent() -> None:
    line = f'{{{T},"type":"event_msg","payload":{{"type":"video","frames":[1]}}}}'
    msg = parse_message(line)
    assert msg.unknown.envelope_type == "event_msg" and msg.unknown.type == "video"
    assert serialize_message(identity(msg)).decode() == line
    assert guards.envelope_type(msg) == "event_msg"

    forged = omni_pb2.OmniMessage()
    forged.CopyFrom(msg)
    forged.unknown.type = "audio"  # differs from the JSON's own type
    with pytest.raises(ConversionError, match="/payload/type: the unknown payload's type"):
        serialize_message(forged)
    forged.unknown.type = "text"
    forged.unknown.json = '{"type":"text","role":"assistant","text":"x"}'
    with pytest.raises(ConversionError, match="a kind this schema knows"):
        serialize_message(forged)
    forged.CopyFrom(msg)
    forged.unknown.envelope_type = ""
    with pytest.raises(ConversionError, match="/type: the unknown payload has no envelope_type"):
        serialize_message(forged)


def test_a_pretty_printed_unknown_payload_is_written_on_one_line() -> None:
    msg = parse_message(f'{{{T},"type":"event_msg","payload":{{"type":"video","a":[1,2]}}}}')
    msg.unknown.json = '{\n  "type": "video",\n  "a": [1, 2]\n}'
    text = serialize_message(msg)
    assert b"\n" not in text and text.endswith(b'"payload":{"type":"video","a":[1,2]}}')


# ---- absence versus empty -------------------------------------------------------


def test_clearing_a_field_gives_absence_even_with_a_key_list() -> None:
    # Keys out of order, so the message carries a key list naming every key.
    line = (
        f'{{"type":"model_msg",{T},"payload":{{"images":["data:a"],"type":"tool_call_output",'
        '"role":"user","output":"o","tool_call_id":"c"},"origin":["child"]}'
    )
    msg = parse_message(line)
    assert msg.key_orders
    del msg.tool_call_output.images[:]
    del msg.origin[:]
    text = serialize_message(msg)
    out = loads(text)
    assert "images" not in out["payload"] and "origin" not in out
    assert serialize_message(parse_message(text)) == text  # and it stays that way

    fid = parse_message(
        f'{{{T},"type":"model_msg","payload":{{"fidelity":{{"b":1,"a":2}},"type":"text",'
        '"role":"assistant","text":"x"}}'
    )
    # Unsorted keys: a key list says their order (the values are not stored twice).
    assert [o.path for o in fid.key_orders if o.path.startswith("/payload/fidelity")]
    fid.text.ClearField("fidelity")  # only the Struct, as a Go program would
    assert "fidelity" not in loads(serialize_message(fid))["payload"]

    meta = parse_message(
        f'{{{T},"type":"session_meta","payload":{{"session_id":"s","provider":"p","model_id":"m",'
        '"model_context_window":1,"system_prompt":"","tools":[{"name":"t","description":""}],'
        '"thinking_level":"x","agent_state":"a","workspace":"w"}}'
    )
    del meta.session_meta.tools[:]
    assert "tools" not in loads(serialize_message(meta))["payload"]


def test_present_but_empty_still_round_trips() -> None:
    for line in [
        f'{{{T},"type":"model_msg","payload":{{"type":"tool_call_output","role":"user",'
        '"output":"","images":[],"tool_call_id":"c"},"origin":[]}',
        f'{{{T},"type":"model_msg","payload":{{"type":"text","role":"user","text":"x",'
        '"fidelity":{},"phase":null}}',
    ]:
        assert serialize_message(parse_message(line)).decode() == line


# ---- enum numbers from newer schemas ------------------------------------------


def test_an_enum_number_the_schema_does_not_know_survives() -> None:
    msg = omni_pb2.OmniMessage(timestamp="t")
    msg.request_end.status = 42  # type: ignore[assignment]  # a newer schema's value
    text = serialize_message(msg)
    assert (
        text == b'{"timestamp":"t","type":"event_msg","payload":{"type":"request_end","status":42}}'
    )
    assert identity(msg).request_end.status == 42


def test_an_enum_given_as_a_known_number_keeps_its_text() -> None:
    line = f'{{{T},"type":"event_msg","payload":{{"type":"request_end","status":1}}}}'
    msg = parse_message(line)
    assert msg.request_end.status == omni_pb2.STOP_REASON_COMPLETED
    assert serialize_message(msg).decode() == line


# ---- edits change only the edited part --------------------------------------


def test_editing_one_fidelity_key_keeps_the_others_bytes_and_order() -> None:
    line = (
        f'{{{T},"type":"model_msg","payload":{{"type":"text","role":"assistant","text":"x",'
        '"fidelity":{"zeta":9007199254740993,"phase":"a","alpha":[1,{"y":1e+21,"x":2}]}}}'
    )
    msg = parse_message(line)
    msg.text.fidelity["phase"] = "b"
    assert serialize_message(msg).decode() == line.replace('"phase":"a"', '"phase":"b"')
    msg.text.fidelity["alpha"][1]["x"] = 3
    assert serialize_message(msg).decode() == line.replace('"phase":"a"', '"phase":"b"').replace(
        '"x":2', '"x":3'
    )
    msg.text.fidelity["new"] = True
    del msg.text.fidelity["zeta"]
    out = serialize_message(msg).decode()
    assert out.endswith('"fidelity":{"phase":"b","alpha":[1,{"y":1e+21,"x":3}],"new":true}}}')


def test_prepending_an_origin_hop_keeps_the_other_hops_exact_text() -> None:
    line = (
        f'{{{T},"type":"event_msg","payload":{{"type":"request_begin"}},"origin":["a\\ud800","b"]}}'
    )
    msg = parse_message(line)
    msg.origin.insert(0, "parent")
    out = serialize_message(msg).decode()
    assert out.endswith('"origin":["parent","a\\ud800","b"]}')


# ---- depth, numbers, encoding: every place a value can nest -----------------


def nest(levels: int) -> str:
    """A JSON value ``levels`` deep: arrays and objects in turn, a number at the bottom."""
    opening = ["[" if n % 2 == 0 else '{"k":' for n in range(levels)]
    closing = ["]" if n % 2 == 0 else ',"a":1.5e-7}' for n in reversed(range(levels))]
    return "".join(opening) + "9007199254740993" + "".join(closing)


# Where opaque JSON rides, and the path its depth counts from (the envelope is level 1).
PLACES = {
    "fidelity": (
        lambda v: (
            f'{{{T},"type":"model_msg","payload":{{"type":"text","role":"user","text":"x",'
            f'"fidelity":{{"deep":{v}}}}}}}'
        ),
        3,
        "/payload/fidelity/deep",
    ),
    "tool schema": (
        lambda v: (
            f'{{{T},"type":"event_msg","payload":{{"type":"tool_list_ready","tools":[{{'
            f'"name":"n","description":"","parameters":{{"p":{v}}}}}]}}}}'
        ),
        5,
        "/payload/tools/0/parameters/p",
    ),
    "unknown key": (
        lambda v: f'{{{T},"type":"event_msg","payload":{{"type":"request_begin","x":{v}}}}}',
        2,
        "/payload/x",
    ),
    "unknown envelope key": (
        lambda v: f'{{{T},"type":"event_msg","payload":{{"type":"request_begin"}},"x":{v}}}',
        1,
        "/x",
    ),
    "unknown payload": (
        lambda v: f'{{{T},"type":"event_msg","payload":{{"type":"future","x":{v}}}}}',
        2,
        "/payload/x",
    ),
}


@pytest.mark.parametrize("place", sorted(PLACES))
def test_any_depth_up_to_the_limit_round_trips(place: str) -> None:
    make, above, _ = PLACES[place]
    for levels in (1, 17, 40, 254, 255, 1000, 1024 - above):
        line = make(nest(levels))
        msg = parse_message(line)
        assert serialize_message(msg).decode() == line, levels
        wire = omni_pb2.OmniMessage.FromString(msg.SerializeToString())  # upb's default limit
        assert serialize_message(wire).decode() == line, levels


@pytest.mark.parametrize("place", sorted(PLACES))
@pytest.mark.parametrize("levels", [1024, 1100, 5000, 200_000])
def test_past_the_limit_is_one_error_with_line_and_path(place: str, levels: int) -> None:
    make, above, path = PLACES[place]
    with pytest.raises(ConversionError) as caught:
        parse_message(make(nest(levels - above + 1)), line=9)
    assert caught.value.line == 9
    assert caught.value.path.startswith(path), caught.value.path
    assert "nested deeper than 1024 levels" in caught.value.reason


@pytest.mark.parametrize(
    "number", ["1e400", "-1e400", "1E+999", "9" * 400, "-" + "9" * 309, "1" + "0" * 5000]
)
@pytest.mark.parametrize("place", sorted(PLACES))
def test_numbers_javascript_reads_as_infinity_are_refused_by_path(number: str, place: str) -> None:
    make, _, path = PLACES[place]
    with pytest.raises(ConversionError) as caught:
        parse_message(make(f"[1,{number}]"), line=2)
    assert caught.value.path == path + "/1"
    assert "outside the range of a double" in caught.value.reason


def test_numbers_near_the_double_range_are_kept() -> None:
    make, _, _ = PLACES["fidelity"]
    for number in ["1.7976931348623157e+308", "9" * 300, "5e-324", "-" + "1" * 308]:
        line = make(f"[{number}]")
        assert serialize_message(parse_message(line)).decode() == line


@pytest.mark.parametrize(
    "raw",
    [b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\xff", b"\xc3", b"\xf4\x90\x80\x80", b"\xc0\xaf"],
)
def test_bytes_that_are_not_utf8_are_refused(raw: bytes) -> None:
    line = b'{"timestamp":"t","type":"model_msg","payload":{"type":"text","role":"user","text":"'
    with pytest.raises(ConversionError, match="not UTF-8"):
        parse_message(line + raw + b'"}}', line=1)
    with pytest.raises(ConversionError, match="not UTF-8"):
        parse_message(line + b"\\u00e9" + raw + b'"}}', line=1)  # the exact-parser path too
