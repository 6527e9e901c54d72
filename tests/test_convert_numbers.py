"""Number text follows JavaScript's ``JSON.stringify`` from every entry point.

Any JavaScript number (a double), put in every kind of place a number can
sit (an integer field, an enum, ``model_context_window``, ``fidelity``, a
tool's ``parameters``, an unknown key, a payload of unknown kind, a server
event), and given to the codec every way it can arrive (JavaScript's text,
Python's float text and other spellings, a parsed dict holding a Python
float or int, the message's wire bytes, a ``Struct`` number set the way Go
or Java code sets one), comes out written as JavaScript writes that number,
on the native and the pure path alike; and the message read back from that
text is the identical message.
"""

from __future__ import annotations

import math
from typing import Any

from google.protobuf import struct_pb2
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_convert_accepted import check_both_paths, pure, wire

from omni_grpc.convert import _jsontext as jt
from omni_grpc.convert import (
    message_from_dict,
    parse_message,
    parse_server_event,
    serialize_message,
    serialize_server_event,
)
from omni_grpc_proto.omni.v1 import omni_pb2

PROFILE = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
numbers = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False),
    st.integers(-(2**53), 2**53).map(float),
    st.sampled_from([0.0, -0.0, 1.0, -1.0, 1e21, 1e-7, 1.5e-7, 2.0**63, -(2.0**63), 5e-324]),
)

# Where a number can sit, as a function of it: (name, envelope, JSON Pointer).
T = "2026-01-02T03:04:05.678Z"


def _event(payload: dict[str, Any]) -> dict[str, Any]:
    return {"timestamp": T, "type": "event_msg", "payload": payload}


def _text(fidelity: dict[str, Any]) -> dict[str, Any]:
    payload = {"type": "text", "role": "assistant", "text": "x", "stop_reason": "completed"}
    return {"timestamp": T, "type": "model_msg", "payload": {**payload, "fidelity": fidelity}}


PLACES: list[tuple[str, Any]] = [
    (
        "integer field",
        lambda n: _event(
            {"type": "compaction_begin", "reason": "context", "mode": "summarize", "context": n}
            | {"turns": 1}
        ),
    ),
    ("enum", lambda n: _event({"type": "request_end", "status": n})),
    (
        "optional integer",
        lambda n: _event({"type": "request_end", "status": "failed", "attempt": n}),
    ),
    (
        "model_context_window",
        lambda n: {
            "timestamp": T,
            "type": "session_meta",
            "payload": {"session_id": "s", "provider": "p", "model_id": "m"}
            | {"model_context_window": n, "system_prompt": "", "agent_state": "", "workspace": ""},
        },
    ),
    ("fidelity", lambda n: _text({"n": n, "list": [n, {"deep": n}]})),
    ("fidelity, unsorted", lambda n: _text({"z": n, "a": [n]})),
    (
        "parameters",
        lambda n: _event(
            {
                "type": "tool_list_ready",
                "tools": [{"name": "t", "description": "d", "parameters": {"max": n, "e": [n]}}],
            }
        ),
    ),
    ("unknown key", lambda n: _event({"type": "request_begin", "extra": n}) | {"more": [n]}),
    ("unknown kind", lambda n: _event({"type": "future_kind", "value": n})),
]


def js_text(obj: Any) -> bytes:
    """JSON.stringify of the object: every float in JavaScript's number text."""
    return jt.dump_value(obj).encode()


def python_text(obj: Any) -> str:
    """The same object in Python's spelling of numbers (1.0, -0.0, 1e-07)."""
    if isinstance(obj, dict):
        return "{" + ",".join(f"{jt.string_text(k)}:{python_text(v)}" for k, v in obj.items()) + "}"
    if isinstance(obj, list):
        return "[" + ",".join(python_text(v) for v in obj) + "]"
    if type(obj) is float:
        return repr(obj)
    return jt.dump_value(obj)


def as_python_value(obj: Any, ints: bool) -> Any:
    """The object as Python code builds it: floats, or ints where integral."""
    if isinstance(obj, dict):
        return {k: as_python_value(v, ints) for k, v in obj.items()}
    if isinstance(obj, list):
        return [as_python_value(v, ints) for v in obj]
    if type(obj) is float and ints and obj.is_integer() and abs(obj) < 2**53:
        return int(obj)
    return obj


def every_entry_point(obj: dict[str, Any]) -> None:
    expected = js_text(obj)
    check_both_paths(expected)  # JavaScript's text, and the invariant on it
    check_both_paths(python_text(obj).encode())  # Python's float text
    for ints in (False, True):
        value = as_python_value(obj, ints)
        msg = message_from_dict(value)
        with pure():
            reference = message_from_dict(value)
        assert wire(msg) == wire(reference)
        assert serialize_message(msg) == expected
        assert serialize_message(omni_pb2.OmniMessage.FromString(wire(msg))) == expected
        assert wire(parse_message(expected)) == wire(msg)


@PROFILE
@given(numbers, st.sampled_from(range(len(PLACES))))
def test_a_number_anywhere_is_written_as_javascript_writes_it(n: float, place: int) -> None:
    every_entry_point(PLACES[place][1](n))


@PROFILE
@given(numbers)
def test_a_struct_number_set_in_go_or_java_is_written_as_javascript_writes_it(n: float) -> None:
    """Struct.number_value set directly (as Go's structpb or Java's builders
    do, -0.0 included): written as JavaScript writes the double."""
    msg = parse_message(js_text(_text({"n": 1})))
    msg.text.fidelity.fields["n"].CopyFrom(struct_pb2.Value(number_value=n))
    line = serialize_message(msg)
    with pure():
        assert serialize_message(msg) == line
    assert line == js_text(_text({"n": n}))
    back = parse_message(line)
    # -0 is written 0 (as JavaScript writes it) and reads back as 0.0.
    assert back.text.fidelity.fields["n"].number_value == n
    assert math.copysign(1, back.text.fidelity.fields["n"].number_value) == 1 or n != 0


@PROFILE
@given(numbers)
def test_a_number_in_a_server_event_is_written_as_javascript_writes_it(n: float) -> None:
    text = js_text({"type": "task_state", "state": "running", "queued": n})
    event = parse_server_event(text)
    assert serialize_server_event(event) == text
    assert parse_server_event(serialize_server_event(event)) == event
    spelled = python_text({"type": "task_state", "state": "running", "queued": n}).encode()
    assert serialize_server_event(parse_server_event(spelled)) == text
