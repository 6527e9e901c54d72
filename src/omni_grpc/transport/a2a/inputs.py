"""What an A2A message asks for, decoded into the hub's terms, naming the field at fault.

A message that starts a task becomes the run's input: each text part a user
text, each URL part an image URL (the only kinds the protocol's user input
has). A message to a task waiting for approval answers it: a data part
``{"toolCallId": ..., "decision": "allow" | "deny" | "forbidden"}`` (the id may
be left out while exactly one call waits). The request's ``metadata`` may name
``approvalMode`` and ``thinkingLevel`` as the other transports' runs do; the
operator's policy decides whether the mode is allowed.
"""

from __future__ import annotations

from dataclasses import dataclass

from a2a.types import a2a_pb2 as a2a
from google.protobuf import json_format

from omni_grpc import protocol
from omni_grpc.convert import message_from_dict
from omni_grpc.transport.a2a.errors import invalid, unsupported_content
from omni_grpc.vocabulary import ApprovalMode, Decision, ThinkingLevel
from omni_grpc_proto.omni.v1 import omni_pb2


@dataclass(frozen=True)
class Answer:
    tool_call_id: str | None
    decision: Decision


def check_sender(message: a2a.Message) -> None:
    """A message sent to this agent is the user's: one without a role, or in
    the agent's own, is a client's mistake (a2a.proto: ``Role role = 4
    [REQUIRED]``, and ROLE_AGENT is "from the server to the client")."""
    if message.role == a2a.ROLE_USER:
        return
    if message.role == a2a.ROLE_UNSPECIFIED:
        raise invalid("message.role", "is required (ROLE_USER)")
    raise invalid("message.role", "must be ROLE_USER: the agent's messages are its own to send")


def run_input(message: a2a.Message) -> list[omni_pb2.OmniMessage]:
    if not message.parts:
        raise invalid("message.parts", "a message needs at least one part")
    out: list[omni_pb2.OmniMessage] = []
    for index, part in enumerate(message.parts):
        kind = part.WhichOneof("content")
        if kind == "text":
            out.append(message_from_dict(protocol.user_text(part.text)))
        elif kind == "url" and (part.media_type or "image/").startswith("image/"):
            out.append(message_from_dict(protocol.image_url(part.url)))
        elif kind is None:
            raise invalid(f"message.parts[{index}]", "an empty part (no text, url, raw or data)")
        else:
            media = f" of {part.media_type}" if part.media_type else ""
            raise unsupported_content(
                f"message.parts[{index}]",
                f"a {kind} part{media} cannot start a task here"
                " (text parts and URL parts of an image type can)",
            )
    return out


def answer(message: a2a.Message) -> Answer:
    """The approval decision a message to an input-required task carries."""
    for index, part in enumerate(message.parts):
        if part.WhichOneof("content") != "data":
            continue
        value = json_format.MessageToDict(part.data)
        field = f"message.parts[{index}].data"
        if not isinstance(value, dict) or "decision" not in value:
            raise invalid(field, 'must be an object {"toolCallId": ..., "decision": "allow"}')
        try:
            decision = Decision(value["decision"])
        except ValueError:
            raise invalid(f"{field}.decision", "must be allow, deny or forbidden") from None
        call_id = value.get("toolCallId")
        if call_id is not None and (not isinstance(call_id, str) or not call_id):
            raise invalid(f"{field}.toolCallId", "must be a non-empty string")
        return Answer(call_id, decision)
    raise invalid(
        "message.parts",
        'the task waits for an approval: send a data part {"toolCallId": ..., "decision": "allow"}',
    )


def approval_mode(metadata: dict[str, object]) -> ApprovalMode | None:
    value = metadata.get("approvalMode")
    if value is None:
        return None
    try:
        return ApprovalMode(str(value))
    except ValueError:
        modes = ", ".join(m.value for m in ApprovalMode)
        raise invalid("metadata.approvalMode", f"must be one of {modes}") from None


def thinking_level(metadata: dict[str, object]) -> str | None:
    value = metadata.get("thinkingLevel")
    if value is None:
        return None
    try:
        return ThinkingLevel(str(value)).value
    except ValueError:
        levels = ", ".join(t.value for t in ThinkingLevel)
        raise invalid("metadata.thinkingLevel", f"must be one of {levels}") from None
