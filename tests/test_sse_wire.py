"""The SSE wire format against the reference captures, byte for byte."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator
from pathlib import Path

import pytest
from conftest import MakeLog
from hypothesis import given
from hypothesis import strategies as st

from omni_grpc.runtime.events import EventBody
from omni_grpc.runtime.memory_log import MemoryEventLog
from omni_grpc.transport.sse.stream import event_frames
from omni_grpc.transport.sse.wire import (
    PASS_THROUGH_FROM,
    PING,
    SSE_HEADERS,
    encode_frame,
    frame_parts,
)
from omni_grpc_proto.omni.v1 import agent_service_pb2, omni_pb2

CONFORMANCE = Path(__file__).parent / "conformance"
EPOCH = "9f3c2a7e"


def capture(name: str) -> bytes:
    return (CONFORMANCE / name).read_bytes()


def capture_data(name: str) -> list[bytes]:
    """The data lines of a capture, in order."""
    return [
        line[len(b"data: ") :] for line in capture(name).split(b"\n") if line.startswith(b"data: ")
    ]


def task_state_body(data: bytes) -> EventBody:
    ev = agent_service_pb2.ServerEvent(
        task_state=agent_service_pb2.TaskState(
            state=agent_service_pb2.SESSION_STATE_RUNNING, queued=0
        )
    )
    return EventBody(message=None, server_event=ev, data=data)


def message_body(data: bytes) -> EventBody:
    return EventBody(message=omni_pb2.OmniMessage(), server_event=None, data=data)


RESYNC = EventBody(
    message=None,
    server_event=agent_service_pb2.ServerEvent(resync_required=agent_service_pb2.ResyncRequired()),
    data=b'{"type":"resync_required"}',
)


async def take(frames: AsyncGenerator[bytes, None], n: int) -> bytes:
    out = b""
    for _ in range(n):
        out += await asyncio.wait_for(frames.__anext__(), 5)
    await frames.aclose()
    return out


async def test_capture_sequence_is_reproduced_byte_for_byte(make_log: MakeLog) -> None:
    """Replays the scenario the captures were taken from (README: ids 1-3
    published, a fresh connect, 5-7, a reconnect that hits, 9, a reconnect from a
    foreign epoch, 12) and compares every connection's bytes with the capture."""
    fresh = capture_data("sse_fresh_connect.txt")
    hit = capture_data("sse_reconnect_hit.txt")
    miss = capture_data("sse_reconnect_miss_resync.txt")
    task_state = fresh[0]
    log = await make_log(epoch=EPOCH)  # on each backend
    for i in range(3):
        await log.publish(message_body(b'{"n":%d}' % i))

    sub1 = await log.subscribe(initial=[task_state_body(task_state)])
    for data in fresh[1:]:
        await log.publish(message_body(data))
    assert await take(event_frames(sub1, heartbeat=None), 4) == capture("sse_fresh_connect.txt")

    sub2 = await log.subscribe(after_event_id=f"{EPOCH}-5", initial=[task_state_body(task_state)])
    await log.publish(message_body(hit[3]))  # the stop, id 9
    assert await take(event_frames(sub2, heartbeat=None), 4) == capture("sse_reconnect_hit.txt")

    sub3 = await log.subscribe(after_event_id="deadbeef-9", initial=[task_state_body(task_state)])
    await log.publish(message_body(miss[2]))  # the complete text, id 12
    assert await take(event_frames(sub3, heartbeat=None), 3) == capture(
        "sse_reconnect_miss_resync.txt"
    )

    # Every reconnect id of the replay capture: a hit replays exactly the
    # buffered ids after it; a miss sends resync_required first.
    cases = json.loads(capture("sse_replay_after_cases.json"))
    cases.pop("lastEventId")
    for last_id, expected in cases.items():
        sub = await log.subscribe(after_event_id=last_id)
        frames = event_frames(sub, heartbeat=None)
        if expected["hit"]:
            wire = await take(frames, len(expected["ids"]))
            ids = [line[4:].decode() for line in wire.split(b"\n") if line.startswith(b"id: ")]
            assert ids == expected["ids"], last_id
            assert b"resync_required" not in wire
        else:
            wire = await take(frames, 1)
            assert wire.startswith(b'event: server_event\ndata: {"type":"resync_required"}\nid: ')


async def test_heartbeat_is_a_comment_on_a_fixed_cadence() -> None:
    log = MemoryEventLog(RESYNC, epoch=EPOCH)
    sub = await log.subscribe()
    frames = event_frames(sub, heartbeat=0.05)
    assert await asyncio.wait_for(frames.__anext__(), 2) == PING
    await log.publish(message_body(b"{}"))
    assert await asyncio.wait_for(frames.__anext__(), 2) == b"data: {}\nid: 9f3c2a7e-1\n\n"
    assert await asyncio.wait_for(frames.__anext__(), 2) == PING
    await frames.aclose()
    # Closing the frames closes the hub subscription: nothing leaks.
    assert log.subscriber_count == 0


async def test_stream_ends_when_the_log_closes() -> None:
    log = MemoryEventLog(RESYNC, epoch=EPOCH)
    frames = event_frames(await log.subscribe(), heartbeat=None)
    await log.close()
    with pytest.raises(StopAsyncIteration):
        await asyncio.wait_for(frames.__anext__(), 2)


def test_frame_layout_follows_hono() -> None:
    assert encode_frame(b'{"a":1}', event_id="e-1") == b'data: {"a":1}\nid: e-1\n\n'
    assert encode_frame(b"{}", event="server_event") == b"event: server_event\ndata: {}\n\n"
    # A payload with line breaks becomes several data lines (any break style).
    assert encode_frame(b"a\nb\r\nc\rd") == b"data: a\ndata: b\ndata: c\ndata: d\n\n"
    # hono drops empty fields.
    assert encode_frame(b"x", event_id="", event="") == b"data: x\n\n"


def _hono_frame(data: bytes, event_id: str, event: str) -> bytes:
    """hono's writeSSE spelled out line by line: the rule the fast path keeps."""
    lines = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")
    out = [b"event: " + event.encode()] if event else []
    out += [b"data: " + line for line in lines]
    out += [b"id: " + event_id.encode()] if event_id else []
    return b"\n".join(out) + b"\n\n"


_SINGLE_LINE = st.text(
    st.characters(exclude_characters="\r\n", exclude_categories=("Cs",)), max_size=12
)


_LARGE = b"p" * PASS_THROUGH_FROM


@given(
    data=st.lists(
        st.sampled_from([b"a", b"{}", b"\n", b"\r", b"\r\n", b"\n\r", b" ", b"\xe2\x80\xa8"])
    ).map(b"".join),
    large=st.booleans(),
    event_id=_SINGLE_LINE,
    event=_SINGLE_LINE,
)
def test_any_payload_is_framed_as_hono_frames_it(
    data: bytes, large: bool, event_id: str, event: str
) -> None:
    # Any mix of line-break styles, at either end and back to back, or none;
    # small, or past the size that goes out in pieces.
    if large:
        data += _LARGE
    expected = _hono_frame(data, event_id, event)
    assert encode_frame(data, event_id=event_id, event=event) == expected
    assert b"".join(frame_parts(data, event_id=event_id, event=event)) == expected


def test_a_large_single_line_payload_goes_out_as_itself() -> None:
    data = b'{"text":"' + b"p" * (16 << 20) + b'"}'
    head, payload, tail = frame_parts(data, event_id="e-1", event="server_event")
    assert payload is data  # every reader sends the event's own bytes, not a copy
    assert head + payload + tail == b"event: server_event\ndata: " + data + b"\nid: e-1\n\n"
    # With a line break in it, the payload is split as hono splits it: one piece.
    broken = data[:100] + b"\n" + data[100:]
    assert frame_parts(broken) == (_hono_frame(broken, "", ""),)


def test_fields_with_line_breaks_are_refused() -> None:
    with pytest.raises(ValueError, match="single line"):
        encode_frame(b"{}", event_id="1\ndata: forged")
    with pytest.raises(ValueError, match="single line"):
        encode_frame(b"{}", event="a\rb")


def test_header_set_matches_the_capture() -> None:
    assert json.loads(capture("sse_response_headers.json")) == SSE_HEADERS
