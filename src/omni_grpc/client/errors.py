"""RPC failures with the server's ``google.rpc.Status`` details unpacked."""

from __future__ import annotations

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status


class AgentError(Exception):
    def __init__(
        self, code: grpc.StatusCode, message: str, field_violations: list[tuple[str, str]]
    ) -> None:
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message
        # (field, description) pairs from a BadRequest detail.
        self.field_violations = field_violations

    @classmethod
    def from_rpc_error(cls, error: grpc.aio.AioRpcError) -> AgentError:
        violations: list[tuple[str, str]] = []
        status = rpc_status.from_call(error)
        if status is not None:
            for detail in status.details:
                if detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
                    bad = error_details_pb2.BadRequest()
                    detail.Unpack(bad)
                    violations.extend((v.field, v.description) for v in bad.field_violations)
        return cls(error.code(), error.details() or "", violations)
