"""The opt-in exact JSON on Run, Attach and GetHistory: the protocol's own
bytes (key order, number text, unknown kinds and keys), as the trace and SSE
carry them, for clients that cannot run the codec."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import ServerFactory

from omni_grpc.client import AgentClient, StreamEvent
from omni_grpc.convert import serialize_message, serialize_server_event

CRAFTED = Path(__file__).parent / "polyglot" / "crafted_lossless.jsonl"
_STAMP = re.compile(r'^\{"timestamp":"[^"]*",')


def exact(event: StreamEvent) -> str:
    if event.message is not None:
        return serialize_message(event.message).decode()
    assert event.server_event is not None
    return serialize_server_event(event.server_event).decode()


async def test_run_attach_and_history_carry_the_reference_bytes(
    server_factory: ServerFactory, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    # The replay engine plays a trace full of what ProtoJSON would mangle:
    # number text (1e+21, 5e-324), key order, an unknown payload kind.
    server = await server_factory(engine=f"replay:{CRAFTED}", engine_options={"delay_ms": "0"},
                                  data_dir=data)  # fmt: skip
    assert server.grpc is not None
    async with AgentClient(server.grpc.address) as client:
        streamed = [e async for e in client.run("play", include_json=True)]
        plain = [e async for e in client.run("again", session_id=streamed[0].session_id)]
        session_id = streamed[0].session_id
        # Attach replays the rest of the first task (up to its end) after its first event.
        replayed = [
            e
            async for e in client.attach(
                session_id, streamed[0].event_id, until_idle=True, include_json=True
            )
        ]
        lines = [line async for line in client.history_lines(session_id)]
    assert all(e.json == exact(e) for e in streamed)
    assert all(e.json == "" for e in plain)  # only when asked
    # The same bytes under the same ids.
    assert [(e.event_id, e.json) for e in replayed] == [(e.event_id, e.json) for e in streamed[1:]]
    # The history is the trace file, byte for byte.
    [trace] = list(data.glob(f"traces/*/{session_id}_*.jsonl"))
    assert b"".join(line + b"\n" for line in lines) == trace.read_bytes()
    # And what ProtoJSON would mangle came through as recorded, timestamps aside.
    recorded = {_STAMP.sub("", e.json) for e in streamed if e.message is not None}
    mangled = [
        _STAMP.sub("", line)
        for line in CRAFTED.read_text().splitlines()
        if any(text in line for text in ("1e+21", "5e-324", '"type":"future_event"'))
    ]
    assert len(mangled) >= 3 and all(line in recorded for line in mangled)
