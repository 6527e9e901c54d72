"""Calls that never end on their own, ended when the server stops.

A ``Health.Watch`` stream (gRPC clients with client-side health checking hold
one per connection) and a reflection stream (grpcurl, Postman, buf curl) stay
open for as long as their client likes. Left to ``server.stop(grace)`` they
hold the stop for its whole grace and are then cancelled, each with an ERROR
traceback in the log. Instead the transport calls ``Closing.close()`` at the
start of the shutdown's last phase: each such call ends at once, cleanly, with
UNAVAILABLE ("the server is shutting down"), which every gRPC client reads as
"reconnect elsewhere".
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from typing import Any

import grpc

SHUTTING_DOWN = "the server is shutting down"


class Closing:
    def __init__(self) -> None:
        self._closed = asyncio.Event()

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def close(self) -> None:
        self._closed.set()

    @staticmethod
    def end(context: grpc.aio.ServicerContext) -> None:
        """Makes the call end with UNAVAILABLE when its handler returns."""
        context.set_code(grpc.StatusCode.UNAVAILABLE)
        context.set_details(SHUTTING_DOWN)

    async def serve(
        self, work: Coroutine[Any, Any, None], context: grpc.aio.ServicerContext
    ) -> None:
        """Runs ``work`` (the call's handler) until it ends, or until the server
        closes: then it is cancelled and the call ends with UNAVAILABLE.

        A call the client cancels is ours to cancel quietly too: grpcio cancels
        this coroutine, which cancels ``work`` and returns nothing to log."""
        if self.closed:
            work.close()
            self.end(context)
            return
        task = asyncio.ensure_future(work)
        closed = asyncio.ensure_future(self._closed.wait())
        try:
            await asyncio.wait({task, closed}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            closed.cancel()
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if task.cancelled():  # the server closed
            self.end(context)
            return
        task.result()  # the handler's own end, or its error
