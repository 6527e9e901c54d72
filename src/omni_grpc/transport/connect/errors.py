"""Errors in the words of Connect and of gRPC-Web.

A ``HubError`` is answered from the one table (``runtime.errors.STATUSES``):
its gRPC code is the code on every protocol. Connect names the code in
lower snake case and, for a unary call, sends it as an HTTP status (the
Connect protocol's mapping); gRPC-Web sends the number in ``grpc-status``.
Both carry the same ``google.rpc`` details as gRPC (``details_of``): Connect as
``{"type", "value"}`` pairs (base64 without padding), gRPC-Web as
``grpc-status-details-bin``.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from urllib.parse import quote

import orjson
from google.protobuf import any_pb2
from google.protobuf.message import Message
from google.rpc import code_pb2, status_pb2

from omni_grpc.runtime.errors import HTTP_STATUS_OF, HubError, details_of, status_of

# Connect's names of the gRPC codes (CANCELLED is spelt the American way).
CODE_NAMES: dict[int, str] = {
    number: ("canceled" if name == "CANCELLED" else name.lower())
    for name, number in code_pb2.Code.items()
    if number != code_pb2.OK
}
# What a client is told of an error the server did not expect (the log has it all).
INTERNAL_MESSAGE = "internal server error"


@dataclass(frozen=True)
class CallError:
    """A call's failure as every protocol here sends it."""

    code: int  # a google.rpc.Code
    message: str
    details: list[Message] = field(default_factory=list)

    @classmethod
    def of(cls, error: HubError) -> CallError:
        return cls(status_of(error).grpc, str(error), details_of(error))

    @property
    def name(self) -> str:
        return CODE_NAMES.get(self.code, "unknown")

    @property
    def http_status(self) -> int:
        """The HTTP status a Connect unary error is sent with: the code's own
        (the protocol's table is google.rpc.Code's, ``runtime.errors``)."""
        return HTTP_STATUS_OF.get(self.code, 500)

    def connect_json(self) -> dict[str, object]:
        """Connect's error object (the unary body, and end-of-stream's ``error``)."""
        out: dict[str, object] = {"code": self.name, "message": self.message}
        if self.details:
            out["details"] = [
                {
                    "type": detail.DESCRIPTOR.full_name,
                    "value": _unpadded(detail.SerializeToString()),
                }
                for detail in self.details
            ]
        return out

    def connect_body(self) -> bytes:
        return orjson.dumps(self.connect_json())

    def end_stream(self) -> bytes:
        """The JSON of Connect's end-of-stream message for this error."""
        return orjson.dumps({"error": self.connect_json()})

    def grpc_fields(self) -> list[tuple[str, str]]:
        """``grpc-status``, ``grpc-message`` and the details, as gRPC-Web's
        trailers (or, before any message, its headers) carry them."""
        fields = [("grpc-status", str(self.code)), ("grpc-message", percent_encoded(self.message))]
        if self.details:
            status = status_pb2.Status(code=self.code, message=self.message)
            for detail in self.details:
                packed = any_pb2.Any()
                packed.Pack(detail)
                status.details.append(packed)
            fields.append(("grpc-status-details-bin", _unpadded(status.SerializeToString())))
        return fields


def percent_encoded(message: str) -> str:
    """``grpc-message``'s encoding: UTF-8, with bytes outside printable ASCII
    and ``%`` itself percent-encoded."""
    return quote(message, safe=" !\"#$&'()*+,-./0123456789:;<=>?@[\\]^_`{|}~" + _LETTERS)


_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def _unpadded(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii").rstrip("=")
