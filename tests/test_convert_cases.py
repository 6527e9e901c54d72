"""Hand-made lines for everything the corpus does not show."""

from __future__ import annotations

import pytest

from omni_grpc.convert import (
    ConversionError,
    message_from_dict,
    message_to_dict,
    parse_message,
    serialize_message,
)
from omni_grpc_proto.omni.v1 import omni_pb2

T = '"timestamp":"2026-08-22T02:15:30.000Z"'

EXACT = [
    # null versus absent
    f'{{{T},"type":"event_msg","payload":{{"type":"abort","reason":null}}}}',
    f'{{{T},"type":"event_msg","payload":{{"type":"abort"}}}}',
    f'{{{T},"type":"event_msg","payload":{{"type":"abort","reason":"aborted by user"}}}}',
    f'{{{T},"type":"model_msg","payload":{{"type":"text","role":"assistant","text":"x","phase":null}}}}',
    # keys in any order, at every level
    f'{{"type":"model_msg",{T},"payload":{{"text":"hi","role":"user","type":"text"}}}}',
    f'{{{T},"type":"event_msg","payload":{{"request":{{"total":3,"output":1,"cache_write":1,"cache_read":1}},"session":{{"cache_read":0,"cache_write":0,"output":0,"total":0}},"type":"token_usage"}}}}',
    # unknown keys everywhere, unknown envelope type, kinds and enum strings
    f'{{{T},"type":"model_msg","payload":{{"type":"text","role":"user","text":"a","lang":"en"}},"trace":{{"span":[1,2]}}}}',
    f'{{{T},"type":"model_msg","payload":{{"type":"text","role":"system","text":"a","stop_reason":"cancelled"}}}}',
    f'{{{T},"type":"model_msg","payload":{{"type":"video","role":"assistant","frames":[{{"t":0.5}}]}}}}',
    f'{{{T},"type":"event_msg","payload":{{"type":"mcp_connect_end","status":"completed","results":[{{"server":"a","transport":"websocket","status":"completed","duration_ms":1,"tools":2,"extra":true}}]}}}}',
    # JavaScript number text
    f'{{{T},"type":"model_msg","payload":{{"type":"thinking","role":"assistant","thinking":"","fidelity":{{"i":1,"f":1.5,"tiny":1.5e-7,"huge":1e+21,"max":9007199254740992,"neg":-0.25,"list":[1,2.5,[3]]}}}}}}',
    f'{{{T},"type":"event_msg","payload":{{"type":"compaction_begin","reason":"context","mode":"summarize","context":1.5,"turns":1e+21}}}}',
    f'{{{T},"type":"event_msg","payload":{{"type":"goal_finished","outcome":"complete","rounds":18446744073709552000,"tokens_used":9007199254740993}}}}',
    # strings: raw non-ASCII, escaped controls, lone surrogates (JS writes \\udxxx)
    f'{{{T},"type":"model_msg","payload":{{"type":"text","role":"user","text":"é😀\\u0001\\n\\t\\"\\\\\u2028"}}}}',
    f'{{{T},"type":"model_msg","payload":{{"type":"text","role":"user","text":"a\\ud800b","fidelity":{{"k\\udc00":"\\udbff"}}}}}}',
    '{"timestamp":"\\ud800","type":"model_msg","payload":{"type":"tool_call_output","role":"user","output":"o","images":["\\udfff"],"tool_call_id":"c"}}',
    # present-but-empty and number-or-string
    f'{{{T},"type":"model_msg","payload":{{"type":"tool_call_output","role":"user","output":"","images":[],"tool_call_id":"c","stop_reason":"completed"}},"origin":[]}}',
    f'{{{T},"type":"session_meta","payload":{{"session_id":"s","provider":"p","model_id":"m","model_context_window":"unknown","system_prompt":"","agent_state":"/a","workspace":"/w"}}}}',
    f'{{{T},"type":"session_meta","payload":{{"session_id":"s","provider":"p","model_id":"m","model_context_window":0,"system_prompt":"","tools":[],"thinking_level":"default","agent_state":"/a","workspace":"/w"}}}}',
    # legacy request_end.message
    f'{{{T},"type":"event_msg","payload":{{"type":"request_end","status":"auth","message":"401","retry_in_ms":0}}}}',
    # an empty fidelity object is kept when the source had one
    f'{{{T},"type":"model_msg","payload":{{"type":"text","role":"assistant","text":"x","stop_reason":"completed","fidelity":{{}}}}}}',
    # an unknown envelope type travels with an unknown payload kind
    f'{{{T},"type":"debug_msg","payload":{{"type":"trace_dump","frames":[]}}}}',
]


@pytest.mark.parametrize("line", EXACT)
def test_exact_bytes_survive(line: str) -> None:
    message = parse_message(line.encode())
    assert serialize_message(message).decode() == line
    wire = omni_pb2.OmniMessage.FromString(message.SerializeToString())
    assert serialize_message(wire).decode() == line


def test_typed_fields_still_tell_the_truth() -> None:
    message = parse_message(EXACT[10].encode())
    fidelity = message.thinking.fidelity
    assert fidelity["i"] == 1.0 and fidelity["tiny"] == 1.5e-7
    surrogates = parse_message(EXACT[14].encode())
    assert surrogates.text.text == "a\ufffdb"  # what UTF-8 can hold; the exact text is in the shape
    unknown = parse_message(EXACT[8].encode())
    assert unknown.WhichOneof("payload") == "unknown"
    assert unknown.unknown.type == "video"
    assert message_to_dict(unknown)["payload"]["frames"] == [{"t": 0.5}]


def test_built_in_another_language_gives_reference_form() -> None:
    """Typed fields only, as a Go or Java producer would set them."""
    message = omni_pb2.OmniMessage(timestamp="2026-08-22T02:15:30.000Z")
    call = message.tool_call
    call.tool_call_id, call.name, call.arguments = "call_0", "ls", '{"path":"."}'
    call.role = omni_pb2.ROLE_ASSISTANT
    call.stop_reason = omni_pb2.STOP_REASON_COMPLETED
    call.fidelity.update({"zeta": 1, "alpha": [1.5, 2, {"b": True, "a": None}]})
    assert serialize_message(message) == (
        b'{"timestamp":"2026-08-22T02:15:30.000Z","type":"model_msg","payload":{"type":"tool_call",'
        b'"role":"assistant","name":"ls","arguments":"{\\"path\\":\\".\\"}","tool_call_id":"call_0",'
        b'"stop_reason":"completed","fidelity":{"alpha":[1.5,2,{"a":null,"b":true}],"zeta":1}}}'
    )
    usage = omni_pb2.OmniMessage(timestamp="t", origin=["child"])
    usage.token_usage.request.total = 5
    assert serialize_message(usage) == (
        b'{"timestamp":"t","type":"event_msg","payload":{"type":"token_usage",'
        b'"session":{"cache_read":0,"cache_write":0,"output":0,"total":0},'
        b'"request":{"cache_read":0,"cache_write":0,"output":0,"total":5}},"origin":["child"]}'
    )
    assert serialize_message(omni_pb2.OmniMessage(timestamp="t", abort=omni_pb2.Abort())) == (
        b'{"timestamp":"t","type":"event_msg","payload":{"type":"abort","reason":null}}'
    )


def test_an_edit_wins_over_a_stale_hint() -> None:
    line = EXACT[10].encode()
    message = parse_message(line)
    message.thinking.fidelity["i"] = 2
    text = serialize_message(message)
    assert b'"i":2' in text and b'"i":1,' not in text
    reordered = parse_message(EXACT[4].encode())
    reordered.text.text = "changed"
    reordered.text.stop_reason = omni_pb2.STOP_REASON_FAILED
    assert serialize_message(reordered) == (
        b'{"type":"model_msg","timestamp":"2026-08-22T02:15:30.000Z","payload":'
        b'{"text":"changed","role":"user","type":"text","stop_reason":"failed"}}'
    )
    enum = parse_message(EXACT[7].encode())
    enum.text.role = omni_pb2.ROLE_ASSISTANT
    assert b'"role":"assistant"' in serialize_message(enum)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (b"[1,2]", "line 3: expected a JSON object, got list"),
        (
            b'{"timestamp":1,"type":"model_msg","payload":{}}',
            "line 3: /timestamp: expected a string, got a number",
        ),
        (
            b'{"timestamp":"t","type":"model_msg","payload":{"type":"text","text":5}}',
            "line 3: /payload/text: expected a string, got a number",
        ),
        (b'{"timestamp":"t","type":"model_msg"}', "line 3: /payload: missing the payload"),
        (
            b'{"timestamp":"t","type":"model_msg","payload":{"role":"user"}}',
            "line 3: /payload/type: missing the payload type",
        ),
        (
            b'{"timestamp":"t","type":"event_msg","payload":{"type":"token_usage","session":{"cache_read":"1"}}}',
            "line 3: /payload/session/cache_read: expected a number, got a string",
        ),
        (
            b'{"timestamp":"t","type":"event_msg","payload":{"type":"tool_list_ready","tools":[{"name":"a","description":"d","parameters":[]}]}}',
            "line 3: /payload/tools/0/parameters: expected an object, got an array",
        ),
        (
            b'{"timestamp":"t","type":"model_msg","payload":{"type":"text","role":null}}',
            "line 3: /payload/role: expected a string, got null",
        ),
        (
            b'{"timestamp":"t","type":"event_msg","payload":{"type":"abort","reason":5}}',
            "line 3: /payload/reason: expected a string or null, got a number",
        ),
        (b'{"a":NaN}', "line 3: not valid JSON"),
        (b'{"a":1', "line 3: not valid JSON"),
        (b"\xff", "line 3: not valid JSON"),
    ],
)
def test_bad_input_is_one_clear_error(text: bytes, message: str) -> None:
    with pytest.raises(ConversionError) as caught:
        parse_message(text, line=3)
    assert str(caught.value).startswith(message)


def test_oversized_line_is_refused_before_parsing() -> None:
    with pytest.raises(ConversionError, match="line 9: message is 101 bytes, over the 100-byte"):
        parse_message(b"x" * 101, line=9, max_bytes=100)


def test_dict_input_and_message_without_payload() -> None:
    obj = {"timestamp": "t", "type": "event_msg", "payload": {"type": "request_begin"}}
    assert serialize_message(message_from_dict(obj)) == (
        b'{"timestamp":"t","type":"event_msg","payload":{"type":"request_begin"}}'
    )
    with pytest.raises(ConversionError, match="no payload"):
        serialize_message(omni_pb2.OmniMessage(timestamp="t"))
