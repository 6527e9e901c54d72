"""GET /messages during a run carries the reference's live tail: the open
fragments so far and the cursor they are complete up to."""

from __future__ import annotations

import asyncio
from pathlib import Path

from test_sse_app import new_session, served

from omni_grpc.client.sse import StreamItem, read_reference
from omni_grpc.convert import message_from_dict
from omni_grpc_proto.omni.v1 import omni_pb2

START, DELTA, STOP = omni_pb2.EVENT_TYPE_START, omni_pb2.EVENT_TYPE_DELTA, omni_pb2.EVENT_TYPE_STOP


def seq(event_id: str) -> int:
    return int(event_id.rsplit("-", 1)[1])


def text_piece(item: StreamItem) -> omni_pb2.PartialText | None:
    if item.message is None or item.message.WhichOneof("payload") != "partial_text":
        return None
    return item.message.partial_text


async def test_a_client_loading_mid_run_rebuilds_the_fragment_exactly(tmp_path: Path) -> None:
    # Slow deltas leave a wide window between the first text delta and its stop.
    async with served(tmp_path, pacing=0.15) as s:
        sid = await new_session(s)
        items: list[StreamItem] = []
        text_started = asyncio.Event()

        async def watch() -> None:
            url = f"/api/sessions/{sid}/stream"
            async for item in read_reference(s.http, url, until_idle=True):
                items.append(item)
                piece = text_piece(item)
                if piece is not None and piece.event_type == DELTA:
                    text_started.set()

        watcher = asyncio.create_task(watch())
        while not items:  # connected: the task_state snapshot arrived
            await asyncio.sleep(0.01)
        body = {"input": [{"type": "text", "text": "tail please"}]}
        assert (await s.http.post(f"/api/sessions/{sid}/tasks", json=body)).status_code == 202
        await asyncio.wait_for(text_started.wait(), 10)
        live = (await s.http.get(f"/api/sessions/{sid}/messages")).json()["live"]
        await asyncio.wait_for(watcher, 30)

        cursor = live["cursor"]
        assert cursor.rsplit("-", 1)[0] == items[0].event_id.rsplit("-", 1)[0]  # same epoch
        fragments = [message_from_dict(f) for f in live["fragments"]]
        (fragment,) = [f for f in fragments if f.WhichOneof("payload") == "partial_text"]
        assert fragment.partial_text.event_type == START and fragment.partial_text.text
        # The reference client: drop buffered partials up to the cursor, paint
        # the fragment, then apply the partials after the cursor.
        rebuilt = fragment.partial_text.text
        for item in items:
            piece = text_piece(item)
            if piece is None or seq(item.event_id) <= seq(cursor):
                continue
            if piece.event_type == STOP:
                break
            rebuilt += piece.text
        complete = [
            i.message.text.text
            for i in items
            if i.message is not None
            and i.message.WhichOneof("payload") == "text"
            and i.message.text.role == omni_pb2.ROLE_ASSISTANT
        ]
        assert rebuilt == complete[0]  # nothing lost, nothing twice

        after = (await s.http.get(f"/api/sessions/{sid}/messages")).json()
        assert "live" not in after  # only while a task runs
