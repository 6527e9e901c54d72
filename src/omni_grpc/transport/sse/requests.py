"""Request bodies: size-limited reads and validation that names the bad field."""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.requests import Request

from omni_grpc import protocol
from omni_grpc.convert import message_from_dict
from omni_grpc.message_size import HTTP_MAX_BODY_BYTES
from omni_grpc.runtime.errors import ErrorCode
from omni_grpc.transport import large_json
from omni_grpc.transport.sse.errors import ApiError, HttpRefusal
from omni_grpc.vocabulary import REFERENCE_ASK, ApprovalMode, Decision, ThinkingLevel
from omni_grpc_proto.omni.v1 import omni_pb2

DEFAULT_MAX_BODY_BYTES = HTTP_MAX_BODY_BYTES
LARGE_BODY_BYTES = large_json.LARGE_BODY_BYTES
THINKING_LEVELS = tuple(ThinkingLevel)


async def read_json(request: Request, limit: int, *, required: bool = True) -> dict[str, Any]:
    """The body as a JSON object; 413 past ``limit`` bytes (checked while reading,
    so a lying or missing Content-Length cannot get more in)."""
    encoding = request.headers.get("content-encoding", "identity").strip().lower()
    if encoding not in ("", "identity"):
        # Read as it is, a compressed body would be "not valid JSON"; say why instead.
        raise ApiError(
            HttpRefusal.UNSUPPORTED_ENCODING,
            f"Content-Encoding {encoding!r}: request bodies are read uncompressed here",
        )
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ApiError(HttpRefusal.BODY_TOO_LARGE, f"request body exceeds {limit} bytes")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise ApiError(HttpRefusal.BODY_TOO_LARGE, f"request body exceeds {limit} bytes")
    if not body or body.isspace():  # (strip() would copy a large body)
        if required:
            raise ApiError(ErrorCode.INVALID_REQUEST, "the request needs a JSON body")
        return {}
    try:
        # A large body is parsed in another process: one parse holds the GIL.
        parsed = await large_json.loads(body)
    except ValueError as exc:  # (orjson.JSONDecodeError is one)
        raise ApiError(HttpRefusal.INVALID_JSON, f"request body is not valid JSON: {exc}") from exc
    if len(body) >= LARGE_BODY_BYTES:
        # What the route does with the body (converting its messages) gets
        # a turn of its own.
        del body
        await asyncio.sleep(0)
    if not isinstance(parsed, dict):
        raise ApiError(ErrorCode.INVALID_REQUEST, "request body must be a JSON object")
    return parsed


def _bad(field: str, problem: str) -> ApiError:
    return ApiError(ErrorCode.INVALID_REQUEST, f"{field}: {problem}")


def input_messages(body: dict[str, Any]) -> list[omni_pb2.OmniMessage]:
    """``input`` parts (reference TaskInputPart) and/or ``prompt`` as user messages."""
    messages: list[omni_pb2.OmniMessage] = []
    parts = body.get("input", [])
    if not isinstance(parts, list):
        raise _bad("input", "must be an array of parts")
    for i, part in enumerate(parts):
        field = f"input[{i}]"
        if not isinstance(part, dict):
            raise _bad(field, "must be an object")
        kind = part.get("type")
        if kind == "text":
            text = part.get("text")
            if not isinstance(text, str):
                raise _bad(f"{field}.text", "must be a string")
            messages.append(message_from_dict(protocol.user_text(text)))
        elif kind == "image_url":
            # imageUrl is the reference's key; image_url is the payload's own name.
            key = "imageUrl" if "imageUrl" in part else "image_url"
            url = part.get(key)
            if not isinstance(url, str) or not url:
                raise _bad(f"{field}.{key}", "must be a non-empty string")
            messages.append(message_from_dict(protocol.image_url(url)))
        elif kind == "file":
            path = part.get("path")
            if path is None and "dataUrl" in part:
                # The reference's upload form; a bridge keeps no scratchpad for it.
                raise _bad(
                    f"{field}.dataUrl",
                    "file uploads are not supported; name a file the server can read with path",
                )
            if not isinstance(path, str) or not path:
                raise _bad(f"{field}.path", "must be a non-empty string")
            # The reference hands files to the model as a marker line.
            messages.append(message_from_dict(protocol.user_text(f"[attached file: {path}]")))
        else:
            raise _bad(f"{field}.type", f"must be text, image_url or file, not {kind!r}")
    prompt = body.get("prompt")
    if prompt is not None:
        if not isinstance(prompt, str) or not prompt:
            raise _bad("prompt", "must be a non-empty string")
        messages.append(message_from_dict(protocol.user_text(prompt)))
    if not messages:
        raise _bad("input", "give at least one input part or a prompt")
    return messages


def thinking_level(body: dict[str, Any]) -> str | None:
    for key in ("thinkingLevel", "thinking_level"):
        value = body.get(key)
        if value is None:
            continue
        if value not in THINKING_LEVELS:
            raise _bad(key, f"must be one of {', '.join(THINKING_LEVELS)}")
        return str(value)
    return None


# The reference's name for a mode we spell differently.
_MODE_ALIASES = {REFERENCE_ASK: ApprovalMode.ASK}


def approval_mode(body: dict[str, Any]) -> ApprovalMode | None:
    for key in ("approvalMode", "approval_mode"):
        value = body.get(key)
        if value is None:
            continue
        if isinstance(value, str) and value in _MODE_ALIASES:
            return _MODE_ALIASES[value]
        try:
            return ApprovalMode(value)
        except ValueError:
            modes = ", ".join([*(m.value for m in ApprovalMode), *_MODE_ALIASES])
            raise _bad(key, f"must be one of {modes}") from None
    return None


def decision(body: dict[str, Any]) -> Decision:
    """A person's answer, as the reference route takes it: allow or deny.
    (``forbidden`` is a command policy's veto, never a person's.)"""
    value = body.get("decision")
    if value not in (Decision.ALLOW, Decision.DENY):
        raise _bad("decision", f"must be allow or deny, not {value!r}")
    return Decision(value)


QUEUE_REFUSED = (
    "the session is running a task and omni-grpc keeps no follow-up queue "
    "(queueIfBusy); send the task again once the session is idle"
)


def queue_if_busy(body: dict[str, Any]) -> bool:
    value = body.get("queueIfBusy", False)
    if not isinstance(value, bool):
        raise _bad("queueIfBusy", "must be a boolean")
    return value


def check_session_options(body: dict[str, Any]) -> None:
    """Session creation options (the reference's SessionCreateRequest).

    A bridged session has the engine's model and a workspace of its own, so
    those are accepted only when they are what the session gets anyway and
    refused rather than ignored otherwise. ``approvalMode`` is the session's
    own (checked against the client modes by the hub).
    """
    for key in ("provider", "modelId", "workspace"):
        value = body.get(key)
        if value is not None and (not isinstance(value, str) or not value):
            raise _bad(key, "must be a non-empty string")
    if body.get("workspace") is not None:
        raise _bad("workspace", "each session gets its own workspace under the data directory")
    approval_mode(body)  # a bad value is named here


def check_session_model(body: dict[str, Any], model: tuple[str, str]) -> None:
    """provider and modelId, if given, must name the engine's model (both or neither)."""
    provider, model_id = body.get("provider"), body.get("modelId")
    if (provider is None) != (model_id is None):
        raise _bad("modelId", "provider and modelId go together: give both or neither")
    if provider is not None and (provider, model_id) != model:
        raise _bad(
            "modelId",
            f"this server's engine runs {model[0]}/{model[1]}; "
            f"{provider}/{model_id} is not available",
        )


def optional_string(body: dict[str, Any], key: str) -> str | None:
    value = body.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise _bad(key, "must be a string")
    return value
