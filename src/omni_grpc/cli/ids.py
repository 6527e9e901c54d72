"""``--ids`` on ``run`` and ``attach``: each message with its event id.

``--json`` prints each OmniMessage as the trace records it, and an event id
is no part of a message; ``attach --after`` needs one. ``--ids`` wraps each
line as ``{"id": EVENT_ID, "message": MESSAGE}``, the message still in the
trace's exact bytes, so a script reads one stream in order (the ids are not
put on stderr, where they would have to be matched up with stdout's lines).
"""

from __future__ import annotations

import json

from omni_grpc.client.events import StreamEvent

IDS_HELP = (
    'JSONL with event ids: each line {"id": EVENT_ID, "message": OMNIMESSAGE} (implies '
    "--json); an id is what `omni-grpc attach --after` resumes from"
)


def with_id(event: StreamEvent) -> bytes:
    """One ``--ids`` line, ending in a newline."""
    event_id = json.dumps(event.event_id).encode()
    return b'{"id":' + event_id + b',"message":' + event.to_json() + b"}\n"
