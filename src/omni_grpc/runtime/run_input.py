"""What a run's input may be: complete user-side model messages, stamped.

A client sends the messages a user would (text, images, inline data, tool
outputs it ran itself); anything an assistant or a system says comes from the
engine, and an origin is the hub's to set, never the client's.
"""

from __future__ import annotations

from omni_grpc import protocol
from omni_grpc.convert import serialize_message
from omni_grpc.message_size import MAX_MESSAGE_BYTES
from omni_grpc.runtime.errors import InvalidRequest
from omni_grpc_proto.omni.v1 import omni_pb2

INPUT_PAYLOADS = frozenset({"text", "image_url", "inline_data", "tool_call_output"})


def check_input(messages: list[omni_pb2.OmniMessage], max_bytes: int = MAX_MESSAGE_BYTES) -> None:
    """Refuses what may not start a run, naming the message at fault; a
    message whose JSON is longer than ``max_bytes`` (the record limit) could not
    be recorded, so it is refused before anything is."""
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
        # JSON is at most six times the protobuf (a control character becomes
        # ``\u00XX``): only a message that could pass the limit is encoded.
        if msg.ByteSize() * 6 > max_bytes and (size := len(serialize_message(msg))) > max_bytes:
            raise InvalidRequest(
                f"input[{index}].{arm}",
                f"the message is {size} bytes of JSON; the largest message is {max_bytes} "
                "bytes (the record limit)",
            )


def stamped(msg: omni_pb2.OmniMessage) -> omni_pb2.OmniMessage:
    """Input without a timestamp gets the time it arrived."""
    if msg.timestamp:
        return msg
    out = omni_pb2.OmniMessage()
    out.CopyFrom(msg)
    out.timestamp = protocol.now_timestamp()
    return out
