"""``grpc.health.v1.Health`` with all three methods, and Watch streams that end.

grpcio-health-checking implements Check and Watch; List, which the same
service advertises, would answer UNIMPLEMENTED with a Python exception text.
grpcio's Watch never returns: on shutdown its streams held ``server.stop``
for the whole grace and were then cancelled with an ERROR traceback each.
Here ``close()`` sends every watcher NOT_SERVING and then ends its stream with
UNAVAILABLE, at the start of the shutdown's last phase.
"""

from __future__ import annotations

import asyncio
from typing import Any

from grpc_health.v1 import health, health_pb2

from omni_grpc.transport.grpc.closing import Closing

SERVICE_NAME = health.SERVICE_NAME
_UNKNOWN = health_pb2.HealthCheckResponse.SERVICE_UNKNOWN


class HealthServicer(health.aio.HealthServicer):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__()
        # Set (and replaced) on every change of any status: watchers wake and
        # compare their service's status with the one they sent last.
        self._changed = asyncio.Event()
        self.closing = Closing()

    async def _set(self, service: str, status: int) -> None:
        self._server_status[service] = status
        self._changed.set()
        self._changed = asyncio.Event()

    async def Watch(self, request: health_pb2.HealthCheckRequest, context: Any) -> None:
        last = None
        while True:
            status = self._server_status.get(request.service, _UNKNOWN)
            if status != last:
                await context.write(health_pb2.HealthCheckResponse(status=status))
                last = status
            if self.closing.closed:  # after the final NOT_SERVING went out
                self.closing.end(context)
                return
            await self._changed.wait()

    async def List(
        self, request: health_pb2.HealthListRequest, context: Any
    ) -> health_pb2.HealthListResponse:
        # The statuses Check answers from (grpcio keeps no public accessor).
        statuses = dict(self._server_status)
        return health_pb2.HealthListResponse(
            statuses={
                name: health_pb2.HealthCheckResponse(status=status)
                for name, status in statuses.items()
            }
        )

    async def close(self) -> None:
        """NOT_SERVING for good, sent to every watcher, then their streams end."""
        await self.enter_graceful_shutdown()
        self.closing.close()
        self._changed.set()  # each watcher wakes, sends NOT_SERVING, and ends
