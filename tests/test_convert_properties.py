"""Property-based checks: random protocol objects of every kind, with unknown
keys, kinds and enum strings, any key order and JavaScript number text."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from omni_grpc.convert import from_betterproto, parse_message, serialize_message, to_betterproto
from omni_grpc.convert._fields import (
    Enum,
    Fidelity,
    Field,
    Int,
    JsonText,
    Nested,
    NumberOrLabel,
    OptStr,
    Str,
    StrList,
)
from omni_grpc.convert._jsontext import dump_value
from omni_grpc.convert._schema import ENVELOPE_TYPE_OF_ARM, PAYLOADS, SESSION_META, ObjectSpec
from omni_grpc_proto.omni.v1 import omni_pb2

# Every string JavaScript can hold, lone surrogates included.
strings = st.text(st.characters(exclude_categories=()), max_size=12)
# Every JavaScript number: a double (integral ones are written as integers).
numbers = st.one_of(
    st.integers(-(2**53), 2**53),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([1e21, 1.5e-7, 2.0**64, -(2.0**63), 5e-324]),
)
json_values = st.recursive(
    st.none() | st.booleans() | numbers | strings,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(strings, inner, max_size=4),
    max_leaves=12,
)


def value_for(field: Field) -> st.SearchStrategy[Any]:
    if isinstance(field, Enum):
        # Known and unknown strings, and numbers: a newer schema's enum values
        # are written as JSON numbers, and any number must survive.
        return st.sampled_from(sorted(field.to_number)) | strings | numbers
    if isinstance(field, NumberOrLabel):
        return numbers | strings
    if isinstance(field, Int):
        return numbers
    if isinstance(field, OptStr) and field.nullable:
        return st.none() | strings
    if isinstance(field, Str):
        return strings
    if isinstance(field, StrList):
        return st.lists(strings, max_size=3)
    if isinstance(field, (Fidelity, JsonText)):
        return st.dictionaries(strings, json_values, max_size=4)
    if isinstance(field, Nested):
        inner = objects(field.spec)
        return st.lists(inner, max_size=3) if field.many else inner
    raise AssertionError(f"no strategy for {type(field).__name__}")


def objects(spec: ObjectSpec) -> st.SearchStrategy[dict[str, Any]]:
    @st.composite
    def build(draw: st.DrawFn) -> dict[str, Any]:
        items: list[tuple[str, Any]] = []
        if spec.type_text is not None:
            items.append(("type", spec.type_text))
        for field in spec.fields:
            if draw(st.floats(0, 1)) < (0.9 if field.required else 0.5):
                items.append((field.key, draw(value_for(field))))
        extra = draw(st.dictionaries(strings, json_values, max_size=2))
        # Extras are keys the schema does not know; a known key left out above
        # must stay out, not come back with a value of the wrong type.
        known = {field.key for field in spec.fields} | dict(items).keys()
        items += [(k, v) for k, v in extra.items() if k not in known]
        if draw(st.booleans()):
            items = draw(st.permutations(items))
        return dict(items)

    return build()


@st.composite
def envelopes(draw: st.DrawFn) -> dict[str, Any]:
    spec = draw(st.sampled_from([*PAYLOADS, SESSION_META]))
    if draw(st.integers(0, 20)) == 0:  # a kind from the future
        payload: dict[str, Any] = {"type": "future_" + draw(strings)}
        payload.update(draw(st.dictionaries(strings, json_values, max_size=3)))
        kind = draw(st.sampled_from(["model_msg", "event_msg"]))
    else:
        payload = draw(objects(spec))
        kind = ENVELOPE_TYPE_OF_ARM[str(spec.arm)]
    items: list[tuple[str, Any]] = [
        ("timestamp", draw(strings)),
        ("type", kind),
        ("payload", payload),
    ]
    if draw(st.booleans()):
        items.append(("origin", draw(st.lists(strings, min_size=1, max_size=2))))
    extra = draw(st.dictionaries(strings, json_values, max_size=2))
    items += [(k, v) for k, v in extra.items() if k not in dict(items)]
    if draw(st.integers(0, 4)) == 0:
        items = draw(st.permutations(items))
    return dict(items)


PROFILE = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROFILE
@given(envelopes())
def test_json_proto_json_is_byte_identical(obj: dict[str, Any]) -> None:
    line = dump_value(obj).encode()  # JavaScript's text for the object
    message = parse_message(line)
    assert serialize_message(message) == line
    wire = message.SerializeToString(deterministic=True)
    assert serialize_message(omni_pb2.OmniMessage.FromString(wire)) == line


@PROFILE
@given(envelopes())
def test_proto_json_proto_is_identical(obj: dict[str, Any]) -> None:
    message = parse_message(dump_value(obj))
    again = parse_message(serialize_message(message))
    assert again == message
    assert again.SerializeToString(deterministic=True) == message.SerializeToString(
        deterministic=True
    )
    twin = to_betterproto(message)
    assert from_betterproto(twin) == message


def test_every_payload_arm_has_a_codec() -> None:
    """A new arm in the schema without a codec entry fails here, not in production."""
    arms = {f.name for f in omni_pb2.OmniMessage.DESCRIPTOR.oneofs_by_name["payload"].fields}
    assert arms - {"unknown"} == set(ENVELOPE_TYPE_OF_ARM)
    for spec in [*PAYLOADS, SESSION_META]:
        proto_fields = set(spec.message.DESCRIPTOR.fields_by_name)
        codec_fields: set[str] = set()
        for field in spec.fields:
            if isinstance(field, NumberOrLabel):
                codec_fields |= {field.number_name, field.label_name}
            elif isinstance(field, Fidelity):
                codec_fields |= {field.name, field.json_name}
            else:
                codec_fields.add(field.name)
        assert codec_fields == proto_fields, spec.arm


@PROFILE
@given(envelopes())
def test_fast_path_agrees_with_the_general_codec(obj: dict[str, Any]) -> None:
    """The generated fast path may decline any input, but what it accepts it
    must convert exactly as the general codec does."""
    from omni_grpc.convert import _message
    from omni_grpc.convert._jsontext import loads_checked

    line = dump_value(obj)
    parsed, clean = loads_checked(line)
    general = _message._general_decode(parsed, None)
    if clean:
        fast = _message._fast_decode(parsed)
        if fast is not None:
            assert fast == general
            assert fast.SerializeToString(deterministic=True) == general.SerializeToString(
                deterministic=True
            )


def test_fast_path_takes_reference_form() -> None:
    """Builder-made lines (most traffic) do take the fast path."""
    from pathlib import Path

    import orjson

    from omni_grpc.convert import _message

    lines = (Path(__file__).parent / "conformance" / "stream_basic_tool_turn.jsonl").read_bytes()
    parsed = [orjson.loads(line) for line in lines.splitlines()]
    taken = [p for p in parsed if _message._fast_decode(p) is not None]
    assert len(taken) >= len(parsed) - 1  # the tool_list_ready JSON Schema needs its hint


# Objects whose keys come in any order, holding values a Struct writes back
# exactly (strings without surrogates, integers a double holds, no -0).
_plain_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.text(st.characters(exclude_categories=("Cs",)), max_size=12),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.text(max_size=6), inner, min_size=2, max_size=4)
    ),
    max_leaves=10,
)


@PROFILE
@given(
    st.sampled_from(["thinking", "text", "tool_call", "inline_data", "inline_thinking"]),
    st.dictionaries(st.text(max_size=6), _plain_values, min_size=2, max_size=5),
)
def test_fast_path_takes_fidelity_in_any_key_order(kind: str, fidelity: dict[str, Any]) -> None:
    """A fidelity that differs from its Struct view only in key order (OpenAI
    reasoning's ``{"id","encrypted_content"}``) is read by the generated fast
    path, with the general codec's key lists, on the one path and the other."""
    from omni_grpc.convert import _message
    from omni_grpc.convert._jsontext import loads_checked

    payload: dict[str, Any] = {"type": kind, "role": "assistant"}
    payload.update(
        {
            "thinking": {"thinking": ""},
            "text": {"text": "t"},
            "tool_call": {"name": "n", "arguments": "{}", "tool_call_id": "c"},
            "inline_data": {"data": "AA==", "mime_type": "image/png"},
            "inline_thinking": {"data": "AA==", "mime_type": "image/png"},
        }[kind]
    )
    payload["stop_reason"] = "completed"
    payload["fidelity"] = fidelity
    line = dump_value({"timestamp": "t", "type": "model_msg", "payload": payload})
    parsed, clean = loads_checked(line)
    assert clean
    general = _message._general_decode(parsed, None)
    assert not general.thinking.fidelity_json and not general.text.fidelity_json
    fast = _message._fast_decode(parsed)
    assert fast is not None, line
    assert fast.SerializeToString(deterministic=True) == general.SerializeToString(
        deterministic=True
    )
    assert serialize_message(fast) == line.encode()


def test_fast_path_takes_openai_reasoning_lines() -> None:
    """The reasoning lines of the sizes benchmark, keys not sorted, take the
    fast path (they fell back to the general codec before)."""
    from omni_grpc.convert import _message

    line = (
        '{"timestamp":"2026-01-02T03:00:01.337Z","type":"model_msg","payload":'
        '{"type":"thinking","role":"assistant","thinking":"","stop_reason":"completed",'
        '"fidelity":{"id":"rs_0a1b","encrypted_content":"gAAAAABo","summary":[],'
        '"nested":{"z":1,"a":[{"y":true,"b":null}]}}}}'
    )
    import orjson

    fast = _message._fast_decode(orjson.loads(line))
    assert fast is not None
    assert [(o.path, list(o.keys)) for o in fast.key_orders] == [
        ("/payload/fidelity", ["id", "encrypted_content", "summary", "nested"]),
        ("/payload/fidelity/nested", ["z", "a"]),
        ("/payload/fidelity/nested/a/0", ["y", "b"]),
    ]
    assert serialize_message(fast) == line.encode()
    assert parse_message(line.encode()) == fast


@PROFILE
@given(st.text(st.characters(exclude_categories=())))
def test_has_surrogate_finds_exactly_the_surrogate_code_points(text: str) -> None:
    from omni_grpc.convert._jsontext import has_surrogate

    assert has_surrogate(text) == any(0xD800 <= ord(c) <= 0xDFFF for c in text)
