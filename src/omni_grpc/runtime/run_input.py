"""What a run's input may be: complete user-side model messages, stamped.

A client sends the messages a user would (text, images, inline data, tool
outputs it ran itself); anything an assistant or a system says comes from the
engine, and an origin is the hub's to set, never the client's.
"""

from __future__ import annotations

from omni_grpc import protocol
from omni_grpc.runtime.errors import InvalidRequest
from omni_grpc_proto.omni.v1 import omni_pb2

INPUT_PAYLOADS = frozenset({"text", "image_url", "inline_data", "tool_call_output"})


def check_input(messages: list[omni_pb2.OmniMessage]) -> None:
    if not messages:
        raise InvalidRequest("input", "a run needs at least one input message or a prompt")
    for index, msg in enumerate(messages):
        arm = msg.WhichOneof("payload")
        if arm is None:
            raise InvalidRequest(f"input[{index}].payload", "no payload is set")
        if arm not in INPUT_PAYLOADS:
            allowed = ", ".join(sorted(INPUT_PAYLOADS))
            raise InvalidRequest(f"input[{index}].payload", f"{arm} is not run input ({allowed})")
        if msg.origin:
            raise InvalidRequest(f"input[{index}].origin", "run input cannot carry an origin")


def stamped(msg: omni_pb2.OmniMessage) -> omni_pb2.OmniMessage:
    """Input without a timestamp gets the time it arrived."""
    if msg.timestamp:
        return msg
    out = omni_pb2.OmniMessage()
    out.CopyFrom(msg)
    out.timestamp = protocol.now_timestamp()
    return out
