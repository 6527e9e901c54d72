"""Connect's ProtoJSON request parser (``transport/connect/protojson``) is
``json_format.Parse`` with long strings set aside: the same message for
every request, the same refusals (lone surrogates, duplicate keys, wrong
types), whatever the threshold."""

from __future__ import annotations

import json

import pytest
from google.protobuf import json_format
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from omni_grpc import protocol
from omni_grpc.convert import message_from_dict
from omni_grpc.transport.connect.protojson import parse
from omni_grpc_proto.omni.v1 import agent_service_pb2 as pb

PROFILE = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
texts = st.text(max_size=40)


@st.composite
def run_requests(draw: st.DrawFn) -> pb.RunRequest:
    request = pb.RunRequest(
        session_id=draw(texts), prompt=draw(texts), include_json=draw(st.booleans())
    )
    for text in draw(st.lists(texts, max_size=3)):
        request.input.append(message_from_dict(protocol.user_text(text)))
    for key, value in draw(st.dictionaries(texts, texts, max_size=3)).items():
        request.metadata[key] = value
    return request


@PROFILE
@given(run_requests(), st.integers(0, 12), st.booleans())
def test_the_same_message_as_json_format(
    request: pb.RunRequest, threshold: int, names: bool
) -> None:
    text = json_format.MessageToJson(request, preserving_proto_field_name=names)
    expected = json_format.Parse(text, pb.RunRequest(), ignore_unknown_fields=True)
    got = pb.RunRequest()
    parse(text, got, threshold)
    assert got == expected == request


@pytest.mark.parametrize(
    "text",
    [
        '{"prompt": "\\ud800"}',  # a lone surrogate, long or short
        '{"prompt": "' + "x" * 5000 + '\\udc00"}',
        '{"input": [{"text": {"text": "' + "x" * 5000 + '\\ud83d"}}]}',
        '{"prompt": "a", "prompt": "b"}',
        '{"prompt": 7}',
        '{"includeJson": "' + "x" * 5000 + '"}',
        "[1]",
        '{"prompt": "x"',
    ],
)
def test_the_same_refusals_as_json_format(text: str) -> None:
    with pytest.raises(json_format.ParseError):
        json_format.Parse(text, pb.RunRequest(), ignore_unknown_fields=True)
    with pytest.raises(json_format.ParseError):
        parse(text, pb.RunRequest())


def test_a_long_prompt_is_set_whole() -> None:
    prompt = "é" * 100_000 + "\U0001f600"
    got = pb.RunRequest()
    parse(json.dumps({"prompt": prompt, "unknownField": "x" * 10_000}), got)
    assert got.prompt == prompt
