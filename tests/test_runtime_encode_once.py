"""Each event is encoded once (wire bytes and JSON text, the one read from the
other) and decoded at most once per process, with the native codec and without."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from omni_grpc import protocol
from omni_grpc.convert import (
    _message,
    encode_message,
    encode_message_dict,
    message_from_dict,
    serialize_message,
)
from omni_grpc.convert._errors import ConversionError
from omni_grpc.runtime import bodies
from omni_grpc.runtime.agent_service import attach_response, response_bytes, run_response
from omni_grpc.runtime.events import HubEvent
from omni_grpc.runtime.memory_log import MemoryEventLog
from omni_grpc.vocabulary import AbortKind, SessionState
from omni_grpc_proto.omni.v1 import agent_service_pb2 as pb

CONFORMANCE = Path(__file__).parent / "conformance"


def corpus_objects() -> list[dict[str, object]]:
    out = []
    for path in sorted(CONFORMANCE.glob("*.jsonl")):
        for line in path.read_bytes().split(b"\n"):
            try:
                message_from_dict(orjson.loads(line))
            except (orjson.JSONDecodeError, ConversionError):
                continue  # torn and broken lines are the codec's tests
            out.append(orjson.loads(line))
    return out


@pytest.fixture(params=["native", "pure"])
def codec(request: pytest.FixtureRequest) -> Iterator[str]:
    native = _message.NATIVE
    if request.param == "native" and native is None:
        pytest.skip("the native codec is not built here")
    if request.param == "pure":
        _message.NATIVE = None
    try:
        yield request.param
    finally:
        _message.NATIVE = native


def test_an_engine_dict_encodes_to_what_the_codec_writes(codec: str) -> None:
    objects = corpus_objects()
    assert len(objects) > 50
    for obj in objects:
        msg, wire, text = encode_message_dict(obj)
        reference = message_from_dict(obj)
        assert msg == reference
        assert omni_pb_parse(wire) == reference
        assert text == serialize_message(reference)
        assert (wire, text) == encode_message(reference)


def omni_pb_parse(wire: bytes) -> object:
    from omni_grpc_proto.omni.v1 import omni_pb2

    return omni_pb2.OmniMessage.FromString(wire)


def test_a_bad_engine_dict_is_refused_as_before(codec: str) -> None:
    bad = {"timestamp": "t", "type": "message", "payload": {"type": "text"}}
    with pytest.raises(ConversionError) as refused:
        message_from_dict(bad)
    with pytest.raises(ConversionError) as again:
        encode_message_dict(bad)
    assert str(again.value) == str(refused.value)


def events() -> list[HubEvent]:
    call = message_from_dict(protocol.tool_call("list_workspace", '{"path":"é"}', "call_1"))
    made = [
        bodies.engine_message(protocol.partial_text("delta", "héllo 😀"))[1],
        bodies.message_body(
            message_from_dict(protocol.assistant_text("done")), AbortKind.CLIENT_GONE
        ),
        bodies.approval_request_body(call),
        bodies.task_state_body(SessionState.IDLE),
        bodies.resync_required_body(),
    ]
    live = [HubEvent(n, f"ep-{n}", body, True, n - 1) for n, body in enumerate(made, 1)]
    return live + [e.stored().replayed() for e in live]


@pytest.mark.parametrize(
    "size", [10, bodies.DECODED_UP_TO - 100, bodies.DECODED_UP_TO + 1, 1 << 20]
)
def test_a_large_body_keeps_its_bytes_and_not_its_decoded_message(codec: str, size: int) -> None:
    """Over ``DECODED_UP_TO`` wire bytes a body does not hold the message
    beside its bytes; whoever asks for it gets it decoded from them, once per
    event, and its payload arm is known without decoding."""
    thought = message_from_dict(protocol.thinking("é" * size))
    made = [
        bodies.engine_message(protocol.assistant_text("x" * size)),
        (thought, bodies.message_body(thought, AbortKind.CLIENT_GONE)),
    ]
    for msg, body in made:
        arm = msg.WhichOneof("payload")
        assert body.wire == msg.SerializeToString()
        assert body.data == serialize_message(msg)
        assert (body.message is not None) == (len(body.wire) <= bodies.DECODED_UP_TO)
        assert body.is_message and body.decoded_message == msg
        for kept in (body, body.stored(), bodies.with_abort_kind(body, AbortKind.ENGINE_FAILURE)):
            assert kept.payload_arm == arm
        event = HubEvent(1, "ep-1", body, True, 0)
        assert event.message == msg
        assert event.message is event.message  # decoded once for all its readers
        assert pb.RunResponse.FromString(response_bytes(event, "s")).message == msg


@pytest.mark.parametrize("with_json", [False, True])
def test_grpc_responses_built_once_are_the_responses(with_json: bool) -> None:
    for event in events():
        sent = response_bytes(event, "sess-1", with_json=with_json)
        assert response_bytes(event, "sess-1", with_json=with_json) is sent  # built once
        expected = run_response(event, "sess-1", with_json=with_json)
        assert pb.RunResponse.FromString(sent) == expected
        attach = attach_response(event, "sess-1", with_json=with_json)
        assert pb.AttachResponse.FromString(sent) == attach
        assert expected.WhichOneof("kind") == ("message" if event.body.is_message else "event")


async def test_a_replayed_event_is_decoded_once_for_all_its_readers() -> None:
    log = MemoryEventLog(bodies.resync_required_body())
    first = await log.publish(bodies.task_state_body(SessionState.RUNNING))
    msg = message_from_dict(protocol.assistant_text("x" * 50))
    await log.publish(bodies.message_body(msg))
    [replayed] = await log.replay_after(first.event_id) or []
    assert replayed.message is replayed.message  # decoded on first use, then kept
    assert replayed.message == msg
    # ... by the replayed copy only: the window keeps the text alone.
    [_, kept] = log._buffer
    assert not kept[0]._memo


class ProtoEngine:
    """An engine that yields protos (as the ``grpc://`` relay does)."""

    async def run(self, input: list[dict[str, object]], options: object) -> Any:
        for item in (
            protocol.request_begin(),
            protocol.assistant_text("hello"),
            protocol.request_end("completed"),
        ):
            yield message_from_dict(item)


async def test_a_proto_engines_message_is_encoded_once_and_never_made_a_dict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``_emit`` encodes a proto once (``bodies.message_body``) and its run
    guard reads the proto itself: no ``message_to_dict`` per message (#43
    item 8; docs/architecture.md, the path of an event)."""
    from omni_grpc.runtime import run_task
    from omni_grpc.runtime.hub import Hub, RunRequest

    to_dict: list[str] = []
    encoded: list[str] = []
    real_to_dict, real_body = run_task.message_to_dict, bodies.message_body

    def counting_to_dict(msg: Any) -> dict[str, Any]:
        to_dict.append(msg.WhichOneof("payload"))
        return real_to_dict(msg)

    def counting_body(msg: Any, *args: Any) -> Any:
        encoded.append(msg.WhichOneof("payload"))
        return real_body(msg, *args)

    monkeypatch.setattr(run_task, "message_to_dict", counting_to_dict)
    monkeypatch.setattr(bodies, "message_body", counting_body)
    hub = Hub(ProtoEngine(), tmp_path / "data")  # type: ignore[arg-type]
    try:
        _, sub = await hub.run(RunRequest(input=[message_from_dict(protocol.user_text("hi"))]))
        while (event := await sub.next()) is not None and not bodies.is_task_end(event):
            pass
        sub.close()
    finally:
        await hub.shutdown()
    # The input is handed to the engine as a dict (what engines read), once.
    assert to_dict == ["text"]
    # Each record once: the trace's session_meta, the input, the engine's three.
    assert encoded == ["session_meta", "text", "request_begin", "text", "request_end"]
