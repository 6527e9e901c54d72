"""A relayed message keeps the wire bytes it arrived as (issue 43 item 5).

The client reads a Run/Attach response's envelope itself and keeps the
message's own bytes (``StreamEvent.from_bytes``); the ``grpc://`` engine
hands them to the hub (``WireMessage``), which sends and keeps those very
bytes and reads the JSON text from them, instead of serializing the message
again. Runs on both backends."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from google.protobuf.message import DecodeError

from omni_grpc import protocol
from omni_grpc.client.events import StreamEvent
from omni_grpc.convert import message_from_dict, parse_message, serialize_message
from omni_grpc.engines.base import JsonObject, RunOptions, WireMessage
from omni_grpc.runtime.backend import Backend
from omni_grpc.runtime.bodies import is_task_end
from omni_grpc.runtime.hub import Hub, RunRequest
from omni_grpc_proto.omni.v1 import agent_service_pb2 as pb
from omni_grpc_proto.omni.v1 import omni_pb2

CONFORMANCE = Path(__file__).parent / "conformance"


def corpus() -> list[omni_pb2.OmniMessage]:
    out = []
    for path in sorted(CONFORMANCE.glob("*.jsonl")):
        for line in path.read_bytes().splitlines():
            try:
                out.append(parse_message(line))
            except ValueError:
                continue
    return out


def same(a: StreamEvent, b: StreamEvent) -> bool:
    return (a.event_id, a.session_id, a.message, a.server_event, a.json) == (
        b.event_id,
        b.session_id,
        b.message,
        b.server_event,
        b.json,
    )


def test_from_bytes_reads_what_protobuf_reads_and_keeps_the_message_bytes() -> None:
    messages = corpus()
    assert len(messages) > 100
    for i, message in enumerate(messages):
        response = pb.RunResponse(
            event_id=f"epoch-{i}", session_id="s" * (i % 200), message=message, json="{}" * i
        )
        event = StreamEvent.from_bytes(response.SerializeToString())
        assert same(event, StreamEvent.from_response(response))
        assert event.wire == message.SerializeToString()
    idle = pb.AttachResponse(
        event_id="e", event=pb.ServerEvent(task_state=pb.TaskState(state=pb.SESSION_STATE_IDLE))
    )
    event = StreamEvent.from_bytes(idle.SerializeToString())
    assert event.is_task_end and event.wire == idle.event.SerializeToString()


@pytest.mark.parametrize(
    "data",
    [
        # The message field twice: protobuf merges the two.
        b"\x0a\x01e" + b"\x12\x02\x08\x01" + b"\x12\x02\x08\x02",
        # Both arms of the oneof: the last wins.
        b"\x12\x00\x1a\x02\x08\x01",
        # A field this schema does not have (kept as unknown by protobuf).
        b"\x0a\x01e\x30\x07",
        b"",
    ],
)
def test_any_other_form_is_decoded_whole_by_protobuf(data: bytes) -> None:
    event = StreamEvent.from_bytes(data)
    assert same(event, StreamEvent.from_response(pb.RunResponse.FromString(data)))


def test_a_truncated_or_broken_response_fails_as_protobuf_fails() -> None:
    message = message_from_dict(protocol.user_text("x" * 300))
    data = pb.RunResponse(event_id="e", session_id="s", message=message).SerializeToString()
    broken = 0
    for cut in range(1, len(data)):
        try:
            whole = StreamEvent.from_response(pb.RunResponse.FromString(data[:cut]))
        except DecodeError:
            broken += 1
            with pytest.raises(DecodeError):
                StreamEvent.from_bytes(data[:cut])
        else:  # cut between fields: still a response
            assert same(StreamEvent.from_bytes(data[:cut]), whole)
    assert broken > len(data) // 2
    with pytest.raises(DecodeError):  # a session id that is not UTF-8
        StreamEvent.from_bytes(b"\x22\x02\xff\xfe")


class Relaying:
    """An engine that yields what it was given to relay, with its bytes."""

    name = "relaying"

    def __init__(self, items: list[omni_pb2.OmniMessage]) -> None:
        self.wires = [m.SerializeToString() for m in items]
        self.items = items

    def session_meta(self, session_id: str, workspace: Path) -> JsonObject:
        return protocol.session_meta_payload(
            session_id, "test", "relay", 1000, "", "", str(workspace)
        )

    async def run(self, input: list[JsonObject], options: RunOptions) -> AsyncIterator[object]:
        for message, wire in zip(self.items, self.wires, strict=True):
            yield WireMessage(message, wire)


async def test_the_hub_sends_a_relayed_message_s_own_bytes(
    tmp_path: Path, make_backend: Callable[..., Backend]
) -> None:
    answer = [
        message_from_dict(protocol.request_begin()),
        message_from_dict(protocol.assistant_text("hello " * 50)),
        message_from_dict(protocol.request_end("completed")),
    ]
    engine = Relaying(answer)
    hub = Hub(engine, tmp_path, backend=make_backend())  # type: ignore[arg-type]
    try:
        prompt = message_from_dict(protocol.user_text("relay"))
        _, sub = await hub.run(RunRequest(input=[prompt]))
        events = []

        async def read() -> None:
            async for event in sub:
                events.append(event)
                if is_task_end(event):
                    return

        await asyncio.wait_for(read(), 10)
        relayed = [e for e in events if e.body.is_message][1:]  # after the input
        assert [e.wire for e in relayed] == engine.wires
        assert [e.data for e in relayed] == [serialize_message(m) for m in answer]
        if hub.backend.shared:
            return  # a replica's copy is read back from the shared log
        # This process's subscribers are handed the very bytes the engine gave.
        assert all(e.wire is w for e, w in zip(relayed, engine.wires, strict=True))
    finally:
        await hub.shutdown()
