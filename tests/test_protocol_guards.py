"""Guards on JSON dicts and on protobuf messages agree."""

from __future__ import annotations

import pytest

from omni_grpc import protocol as p
from omni_grpc_proto.omni.v1 import omni_pb2

TS = "2026-01-01T00:00:00.000Z"


@pytest.mark.parametrize(
    ("msg", "model", "event", "meta", "complete", "partial", "recordable"),
    [
        (p.user_text("hi", timestamp=TS), True, False, False, True, False, True),
        (p.partial_text("delta", "h", timestamp=TS), True, False, False, False, True, False),
        (p.request_begin(timestamp=TS), False, True, False, False, False, True),
        (
            p.session_meta(p.session_meta_payload("s", "p", "m", 1, "", "/a", "/w"), timestamp=TS),
            False,
            False,
            True,
            False,
            False,
            True,
        ),
        (p.with_origin(p.user_text("hi"), "child"), True, False, False, True, False, False),
    ],
)
def test_dict_guards(
    msg: dict[str, object],
    model: bool,
    event: bool,
    meta: bool,
    complete: bool,
    partial: bool,
    recordable: bool,
) -> None:
    assert p.is_model_message(msg) is model
    assert p.is_event_message(msg) is event
    assert p.is_session_meta(msg) is meta
    assert p.is_complete_model_message(msg) is complete
    assert p.is_partial_payload(msg) is partial
    assert p.is_recordable(msg) is recordable


def test_is_partial_payload_accepts_a_bare_payload() -> None:
    assert p.is_partial_payload({"type": "partial_thinking"})
    assert not p.is_partial_payload({"type": "thinking"})
    # A future partial kind is still a fragment and stays out of traces.
    assert p.is_partial_payload({"type": "partial_audio"})


def test_protobuf_guards() -> None:
    partial = omni_pb2.OmniMessage(timestamp=TS)
    partial.partial_text.event_type = omni_pb2.EVENT_TYPE_DELTA
    assert p.is_model_message(partial) and p.is_partial_payload(partial)
    assert not p.is_recordable(partial)

    text = omni_pb2.OmniMessage(timestamp=TS)
    text.text.text = "hi"
    assert p.is_complete_model_message(text) and p.is_recordable(text)
    text.origin.append("child")
    assert not p.is_recordable(text)

    begin = omni_pb2.OmniMessage(timestamp=TS)
    begin.request_begin.SetInParent()
    assert p.is_event_message(begin) and p.payload_kind(begin) == "request_begin"

    unknown = omni_pb2.OmniMessage(timestamp=TS)
    unknown.unknown.envelope_type = "event_msg"
    unknown.unknown.type = "future_event"
    unknown.unknown.json = '{"type":"future_event"}'
    assert p.payload_kind(unknown) == "future_event" and p.is_recordable(unknown)
