"""Message builders mirroring the reference ``builders.ts``.

Each returns a plain JSON dict whose key order is exactly the order the reference
inserts keys, so ``json.dumps(..., separators=(",", ":"), ensure_ascii=False)`` (or
the codec) writes the bytes the reference writes. Omission rules follow the
reference: ``stop_reason`` is always written (default ``"completed"``); ``fidelity``
is left out when ``None`` or ``{}``; ``images`` when ``None`` or ``[]``; optional
retry keys when ``None``. Every builder takes ``timestamp=`` for deterministic
output; without it the current time is used. Words from ``omni_grpc.vocabulary``
are accepted wherever a spelling goes and written as plain ``str`` (the codec's
fast path checks ``type(value) is str``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from omni_grpc.protocol.timestamps import now_timestamp
from omni_grpc.vocabulary import Decision, StopReason

Json = dict[str, Any]

DENIED_BY_USER = "Tool call denied by user."
DENIED_BY_POLICY = "Tool call denied by policy."
# A call nobody decided on: "Tool call not run: aborted by user."
NOT_RUN_PREFIX = "Tool call not run: "


def _envelope(kind: str, payload: Json, timestamp: str | None) -> Json:
    return {
        "timestamp": timestamp if timestamp is not None else now_timestamp(),
        "type": kind,
        "payload": payload,
    }


def _model(payload: Json, timestamp: str | None) -> Json:
    return _envelope("model_msg", payload, timestamp)


def _event(payload: Json, timestamp: str | None) -> Json:
    return _envelope("event_msg", payload, timestamp)


def _with_fidelity(payload: Json, fidelity: Mapping[str, Any] | None) -> Json:
    if fidelity:
        payload["fidelity"] = dict(fidelity)
    return payload


# ---- complete model payloads ------------------------------------------------


def text_message(
    role: str,
    text: str,
    *,
    stop_reason: str = StopReason.COMPLETED,
    fidelity: Mapping[str, Any] | None = None,
    timestamp: str | None = None,
) -> Json:
    payload: Json = {"type": "text", "role": role, "text": text, "stop_reason": str(stop_reason)}
    return _model(_with_fidelity(payload, fidelity), timestamp)


def user_text(text: str, sender: str | None = None, *, timestamp: str | None = None) -> Json:
    msg = text_message("user", text, timestamp=timestamp)
    # The reference assigns sender after building, so it is the last key; the
    # human user is the default and is never written.
    if sender is not None and sender != "user":
        msg["payload"]["sender"] = sender
    return msg


def assistant_text(
    text: str,
    *,
    stop_reason: str = StopReason.COMPLETED,
    fidelity: Mapping[str, Any] | None = None,
    timestamp: str | None = None,
) -> Json:
    return text_message(
        "assistant", text, stop_reason=stop_reason, fidelity=fidelity, timestamp=timestamp
    )


def image_url(
    url: str, *, stop_reason: str = StopReason.COMPLETED, timestamp: str | None = None
) -> Json:
    payload: Json = {"type": "image_url", "role": "user", "image_url": url}
    payload["stop_reason"] = str(stop_reason)
    return _model(payload, timestamp)


def inline_data(
    role: str,
    data: str,
    mime_type: str,
    *,
    stop_reason: str = StopReason.COMPLETED,
    fidelity: Mapping[str, Any] | None = None,
    timestamp: str | None = None,
) -> Json:
    payload: Json = {
        "type": "inline_data",
        "role": role,
        "data": data,
        "mime_type": mime_type,
        "stop_reason": str(stop_reason),
    }
    return _model(_with_fidelity(payload, fidelity), timestamp)


def inline_thinking(
    data: str,
    mime_type: str,
    *,
    stop_reason: str = StopReason.COMPLETED,
    fidelity: Mapping[str, Any] | None = None,
    timestamp: str | None = None,
) -> Json:
    payload: Json = {
        "type": "inline_thinking",
        "role": "assistant",
        "data": data,
        "mime_type": mime_type,
        "stop_reason": str(stop_reason),
    }
    return _model(_with_fidelity(payload, fidelity), timestamp)


def thinking(
    text: str,
    *,
    stop_reason: str = StopReason.COMPLETED,
    fidelity: Mapping[str, Any] | None = None,
    timestamp: str | None = None,
) -> Json:
    payload: Json = {
        "type": "thinking",
        "role": "assistant",
        "thinking": text,
        "stop_reason": str(stop_reason),
    }
    return _model(_with_fidelity(payload, fidelity), timestamp)


def tool_call(
    name: str,
    arguments: str,
    tool_call_id: str,
    *,
    stop_reason: str = StopReason.COMPLETED,
    fidelity: Mapping[str, Any] | None = None,
    timestamp: str | None = None,
) -> Json:
    payload: Json = {
        "type": "tool_call",
        "role": "assistant",
        "name": name,
        "arguments": arguments,
        "tool_call_id": tool_call_id,
        "stop_reason": str(stop_reason),
    }
    return _model(_with_fidelity(payload, fidelity), timestamp)


def tool_call_output(
    output: str,
    tool_call_id: str,
    *,
    images: Sequence[str] | None = None,
    stop_reason: str = StopReason.COMPLETED,
    timestamp: str | None = None,
) -> Json:
    payload: Json = {"type": "tool_call_output", "role": "user", "output": output}
    if images:
        payload["images"] = list(images)
    payload["tool_call_id"] = tool_call_id
    payload["stop_reason"] = str(stop_reason)
    return _model(payload, timestamp)


def unanswered_tool_output(
    call: Mapping[str, Any], stop_reason: str, reason: str, *, timestamp: str | None = None
) -> Json:
    """The output of a tool call that never ran because nobody decided on it:
    ``stop_reason`` ``aborted`` (the run stopped while it waited) or
    ``timeout`` (the approval wait ran out), and ``reason`` in the text."""
    payload = call.get("payload", call)
    call_id = payload.get("tool_call_id") if isinstance(payload, Mapping) else None
    if not isinstance(call_id, str):
        raise ValueError("the tool call has no string tool_call_id")
    return tool_call_output(
        f"{NOT_RUN_PREFIX}{reason}.", call_id, stop_reason=stop_reason, timestamp=timestamp
    )


# The output of a tool call a user abort interrupted (the reference's words).
TOOL_ABORTED_PLACEHOLDER = "[interrupted: tool aborted by user]"


def denied_tool_output(
    call: Mapping[str, Any], decision: str, *, timestamp: str | None = None
) -> Json:
    """The synthetic ``aborted`` output the engine emits for a refused tool call.

    ``call`` is the ``tool_call`` message (or its payload); ``decision`` is
    ``"deny"`` (the user said no) or ``"forbidden"`` (the command policy vetoed it).
    """
    texts: dict[str, str] = {Decision.DENY: DENIED_BY_USER, Decision.FORBIDDEN: DENIED_BY_POLICY}
    if decision not in texts:
        raise ValueError(f"no denied output for decision {decision!r}: use deny or forbidden")
    payload = call.get("payload", call)
    call_id = payload.get("tool_call_id") if isinstance(payload, Mapping) else None
    if not isinstance(call_id, str):
        raise ValueError("the tool call has no string tool_call_id")
    return tool_call_output(
        texts[decision], call_id, stop_reason=StopReason.ABORTED, timestamp=timestamp
    )


# ---- streaming partials -----------------------------------------------------


def partial_text(
    event_type: str,
    text: str = "",
    *,
    stop_reason: str = StopReason.COMPLETED,
    timestamp: str | None = None,
) -> Json:
    payload: Json = {
        "type": "partial_text",
        "role": "assistant",
        "event_type": str(event_type),
        "text": text,
        "stop_reason": str(stop_reason),
    }
    return _model(payload, timestamp)


def partial_thinking(
    event_type: str,
    text: str = "",
    *,
    stop_reason: str = StopReason.COMPLETED,
    timestamp: str | None = None,
) -> Json:
    payload: Json = {
        "type": "partial_thinking",
        "role": "assistant",
        "event_type": str(event_type),
        "thinking": text,
        "stop_reason": str(stop_reason),
    }
    return _model(payload, timestamp)


def partial_tool_call(
    event_type: str,
    name: str = "",
    arguments: str = "",
    tool_call_id: str = "",
    *,
    stop_reason: str = StopReason.COMPLETED,
    timestamp: str | None = None,
) -> Json:
    payload: Json = {
        "type": "partial_tool_call",
        "role": "assistant",
        "event_type": str(event_type),
        "name": name,
        "arguments": arguments,
        "tool_call_id": tool_call_id,
        "stop_reason": str(stop_reason),
    }
    return _model(payload, timestamp)


def partial_tool_call_output(
    event_type: str,
    output: str = "",
    tool_call_id: str = "",
    *,
    images: Sequence[str] | None = None,
    stop_reason: str = StopReason.COMPLETED,
    timestamp: str | None = None,
) -> Json:
    payload: Json = {
        "type": "partial_tool_call_output",
        "role": "user",
        "event_type": str(event_type),
        "output": output,
    }
    if images:
        payload["images"] = list(images)
    payload["tool_call_id"] = tool_call_id
    payload["stop_reason"] = str(stop_reason)
    return _model(payload, timestamp)


# ---- events -----------------------------------------------------------------


def approval_decision(decision: str, tool_call_id: str, *, timestamp: str | None = None) -> Json:
    payload: Json = {"type": "approval_decision", "decision": str(decision)}
    payload["tool_call_id"] = tool_call_id
    return _event(payload, timestamp)


def abort_event(reason: str | None = None, *, timestamp: str | None = None) -> Json:
    # The key is always written; a missing reason is JSON null.
    return _event({"type": "abort", "reason": reason}, timestamp)


def request_begin(*, timestamp: str | None = None) -> Json:
    return _event({"type": "request_begin"}, timestamp)


def request_end(
    status: str,
    *,
    error_message: str | None = None,
    attempt: int | None = None,
    retry_in_ms: int | None = None,
    timestamp: str | None = None,
) -> Json:
    payload: Json = {"type": "request_end", "status": str(status)}
    if error_message is not None:
        payload["error_message"] = error_message
    if attempt is not None:
        payload["attempt"] = attempt
    if retry_in_ms is not None:
        payload["retry_in_ms"] = retry_in_ms
    return _event(payload, timestamp)


def empty_token_counts() -> Json:
    return {"cache_read": 0, "cache_write": 0, "output": 0, "total": 0}


def _token_counts(counts: Mapping[str, int]) -> Json:
    return {key: counts[key] for key in ("cache_read", "cache_write", "output", "total")}


def add_token_counts(a: Mapping[str, int], b: Mapping[str, int]) -> Json:
    return {key: a[key] + b[key] for key in ("cache_read", "cache_write", "output", "total")}


def token_usage(
    session: Mapping[str, int], request: Mapping[str, int], *, timestamp: str | None = None
) -> Json:
    payload: Json = {"type": "token_usage", "session": _token_counts(session)}
    payload["request"] = _token_counts(request)
    return _event(payload, timestamp)


def compaction_begin(
    reason: str, mode: str, context: int, turns: int, *, timestamp: str | None = None
) -> Json:
    payload: Json = {"type": "compaction_begin", "reason": reason, "mode": mode}
    payload["context"] = context
    payload["turns"] = turns
    return _event(payload, timestamp)


def compaction_end(
    reason: str,
    mode: str,
    status: str,
    *,
    attempt: int | None = None,
    error_message: str | None = None,
    timestamp: str | None = None,
) -> Json:
    # Note the order differs from request_end: attempt before error_message.
    payload: Json = {
        "type": "compaction_end",
        "reason": reason,
        "mode": mode,
        "status": str(status),
    }
    if attempt is not None:
        payload["attempt"] = attempt
    if error_message is not None:
        payload["error_message"] = error_message
    return _event(payload, timestamp)


def goal_finished(
    outcome: str, rounds: int, tokens_used: int, *, timestamp: str | None = None
) -> Json:
    payload: Json = {"type": "goal_finished", "outcome": outcome, "rounds": rounds}
    payload["tokens_used"] = tokens_used
    return _event(payload, timestamp)


def subagent_event(session_id: str, *, timestamp: str | None = None) -> Json:
    return _event({"type": "subagent", "session_id": session_id}, timestamp)


def tool_definition(
    name: str, description: str, parameters: Mapping[str, Any] | None = None
) -> Json:
    tool: Json = {"name": name, "description": description}
    if parameters is not None:
        tool["parameters"] = dict(parameters)
    return tool


def tool_list_ready(tools: Iterable[Mapping[str, Any]], *, timestamp: str | None = None) -> Json:
    listed = [tool_definition(t["name"], t["description"], t.get("parameters")) for t in tools]
    return _event({"type": "tool_list_ready", "tools": listed}, timestamp)


def mcp_connect_begin(servers: Sequence[str], *, timestamp: str | None = None) -> Json:
    return _event({"type": "mcp_connect_begin", "servers": list(servers)}, timestamp)


def mcp_server_result(
    server: str,
    transport: str,
    status: str,
    duration_ms: int,
    *,
    tools: int | None = None,
    error: str | None = None,
) -> Json:
    result: Json = {"server": server, "transport": transport, "status": str(status)}
    result["duration_ms"] = duration_ms
    if tools is not None:
        result["tools"] = tools
    if error is not None:
        result["error"] = error
    return result


def mcp_connect_end(
    status: str, results: Sequence[Mapping[str, Any]], *, timestamp: str | None = None
) -> Json:
    payload: Json = {"type": "mcp_connect_end", "status": str(status)}
    payload["results"] = [dict(r) for r in results]
    return _event(payload, timestamp)


# ---- session_meta and origin --------------------------------------------------


def session_meta_payload(
    session_id: str,
    provider: str,
    model_id: str,
    model_context_window: int | str,
    system_prompt: str,
    agent_state: str,
    workspace: str,
    *,
    source: str | None = None,
) -> Json:
    """A meta payload in the order the reference agent writes it."""
    payload: Json = {
        "session_id": session_id,
        "provider": provider,
        "model_id": model_id,
        "model_context_window": model_context_window,
        "system_prompt": system_prompt,
        "agent_state": agent_state,
        "workspace": workspace,
    }
    if source is not None:
        payload["source"] = source
    return payload


def session_meta(payload: Mapping[str, Any], *, timestamp: str | None = None) -> Json:
    """Wraps ``payload`` unchanged (the reference passes it through)."""
    return _envelope("session_meta", dict(payload), timestamp)


def with_origin(msg: Mapping[str, Any], session_id: str) -> Json:
    """Prefix ``session_id`` to the origin chain (outer to inner). A new ``origin``
    key goes last; an existing one keeps its position, like the JS spread."""
    out = dict(msg)
    previous = msg.get("origin") or []
    out["origin"] = [session_id, *previous]
    return out
