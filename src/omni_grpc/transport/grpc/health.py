"""``grpc.health.v1.Health`` with all three methods.

grpcio-health-checking implements Check and Watch; List, which the same
service advertises, would answer UNIMPLEMENTED with a Python exception text.
"""

from __future__ import annotations

from typing import Any

from grpc_health.v1 import health, health_pb2

SERVICE_NAME = health.SERVICE_NAME


class HealthServicer(health.aio.HealthServicer):  # type: ignore[misc]
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
