"""How large one message may be, and the transport limits that follow from it.

One message's JSON text may be up to ``MAX_MESSAGE_BYTES`` (64 MiB): the
trace readers' and the codec's line limit, so every message the server
accepts can be recorded, replayed and read back. A prompt, a tool output or
an image (as a data URL or inline data) past it is refused before the run
starts (gRPC ``INVALID_ARGUMENT``, HTTP 400, naming the field and its size);
an engine's message past it stops the run (``record limit``).

The transports' own limits are set so that such a message fits:

* gRPC (server, Python client, CLI, the Go/Java/Node examples): a Run or
  Attach response carries the message's protobuf and, with ``include_json``,
  its JSON beside it, so ``GRPC_MAX_MESSAGE_BYTES`` is twice the message
  limit plus room for the envelope. A request past it is refused by gRPC
  itself (``RESOURCE_EXHAUSTED``, naming both sizes).
* HTTP: a request body carrying one such message and its other fields
  (``HTTP_MAX_BODY_BYTES``); past it the answer is 413 naming the limit.
"""

from __future__ import annotations

MAX_MESSAGE_BYTES = 64 * 1024 * 1024
_ENVELOPE = 1024 * 1024
GRPC_MAX_MESSAGE_BYTES = 2 * MAX_MESSAGE_BYTES + _ENVELOPE
HTTP_MAX_BODY_BYTES = MAX_MESSAGE_BYTES + _ENVELOPE
