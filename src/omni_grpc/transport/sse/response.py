"""An ASGI response for endless event streams that notices a gone client.

Starlette's StreamingResponse only watches for ``http.disconnect`` under ASGI
spec < 2.4; on newer servers an idle stream would hold its subscription until
the next heartbeat write fails. This one always races the stream against the
client's disconnect (``http_call.until_disconnect``, as Connect's streams do)
and closes the generator either way, so no hub subscription outlives its
connection.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from omni_grpc.transport.http_call import until_disconnect
from omni_grpc.transport.sse.wire import SSE_HEADERS


class EventStreamResponse(Response):
    def __init__(
        self,
        frames: AsyncGenerator[bytes, None],
        *,
        headers: Mapping[str, str] | None = None,
        status_code: int = 200,
    ) -> None:
        self.frames = frames
        self.status_code = status_code
        self.background = None
        # transfer-encoding is the server's business (it frames the body; HTTP/2
        # forbids the header), so it is left to it: uvicorn answers chunked.
        merged = {k: v for k, v in SSE_HEADERS.items() if k != "transfer-encoding"}
        merged.update(headers or {})
        self.raw_headers = [(k.lower().encode(), v.encode()) for k, v in merged.items()]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def answer() -> None:
            start = {"status": self.status_code, "headers": self.raw_headers}
            await send({"type": "http.response.start", **start})
            async for frame in self.frames:
                await send({"type": "http.response.body", "body": frame, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})

        await until_disconnect(receive, answer, self.frames.aclose)
