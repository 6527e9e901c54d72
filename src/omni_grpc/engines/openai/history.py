"""Session history for the chat-completions loop, rebuilt from the session's trace.

The rules follow the reference resume (digest section 4): a request's output is
committed only when its ``request_end`` says ``completed``; the assistant
output of any other request is dropped, while the user input of an
uncommitted turn is carried over into the next run. Tool outputs are sent back
in call order right after the assistant message that asked for them, whatever
order they finished in; a committed call without an output gets the
reference's ``[interrupted: ...]`` placeholder.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from omni_grpc.protocol import builders as b
from omni_grpc.vocabulary import StopReason

JsonObject = dict[str, Any]

INTERRUPTED = "[interrupted: process exited before the tool finished]"
_USER_INPUT = frozenset({"text", "image_url", "inline_data"})
_ASSISTANT = frozenset({"text", "thinking", "tool_call", "inline_data", "inline_thinking"})


@dataclass
class History:
    """Committed payloads plus the carried-over input, in trace order."""

    items: list[JsonObject] = field(default_factory=list)
    # The last recorded session-cumulative token counts.
    session_usage: JsonObject = field(default_factory=b.empty_token_counts)


def rebuild(envelopes: Iterable[Mapping[str, Any]]) -> History:
    history = History()
    committed: list[JsonObject] = []
    committed_calls: set[str] = set()
    pending_input: list[JsonObject] = []
    pending_output: list[JsonObject] = []
    for envelope in envelopes:
        if envelope.get("origin"):
            continue  # a child session's message; the child has its own trace
        payload = envelope.get("payload")
        if not isinstance(payload, dict):
            continue
        kind = payload.get("type")
        role = payload.get("role")
        if kind == "tool_call_output":
            # An output that arrives after its request committed belongs to that turn.
            if payload.get("tool_call_id") in committed_calls:
                committed.append(payload)
            else:
                pending_output.append(payload)
        elif kind in _USER_INPUT and role == "user":
            pending_input.append(payload)
        elif kind in _ASSISTANT and role == "assistant":
            pending_output.append(payload)
        elif kind == "request_end":
            if payload.get("status") == StopReason.COMPLETED:
                committed += pending_input + pending_output
                committed_calls.update(
                    str(p.get("tool_call_id")) for p in pending_output if p["type"] == "tool_call"
                )
                pending_input, pending_output = [], []
            else:
                pending_output = []
        elif kind == "abort":
            pending_output = []
        elif kind == "compaction_end" and payload.get("status") == StopReason.COMPLETED:
            # A closed context: what follows (the summary) starts the new one.
            committed, committed_calls = [], set()
            pending_input, pending_output = [], []
        elif kind == "token_usage" and isinstance(payload.get("session"), dict):
            history.session_usage = dict(payload["session"])
    history.items = committed + pending_input
    return history


def drop_echoed_input(history: History, run_input: list[JsonObject]) -> None:
    """Removes this run's input when the server already recorded it in the trace."""
    payloads = [m.get("payload") for m in run_input]
    n = len(payloads)
    if n and history.items[-n:] == payloads:
        del history.items[-n:]


# ---- chat-completions messages ---------------------------------------------------


def to_chat_messages(
    items: list[JsonObject], system_prompt: str, *, replay_reasoning: bool
) -> list[JsonObject]:
    """The ``messages`` array for ``/v1/chat/completions``."""
    outputs: dict[str, JsonObject] = {}
    for item in items:
        if item.get("type") == "tool_call_output":
            outputs.setdefault(str(item.get("tool_call_id")), item)
    messages: list[JsonObject] = [{"role": "system", "content": system_prompt}]
    i = 0
    while i < len(items):
        item = items[i]
        if item.get("role") == "assistant":
            group = [item]
            while i + 1 < len(items) and items[i + 1].get("role") == "assistant":
                i += 1
                group.append(items[i])
            messages += _assistant_turn(group, outputs, replay_reasoning)
        elif item.get("type") != "tool_call_output":
            parts = [item]
            while (
                i + 1 < len(items)
                and items[i + 1].get("role") == "user"
                and items[i + 1].get("type") != "tool_call_output"
            ):
                i += 1
                parts.append(items[i])
            messages.append(_user_message(parts))
        i += 1
    return messages


def _assistant_turn(
    group: list[JsonObject], outputs: Mapping[str, JsonObject], replay_reasoning: bool
) -> list[JsonObject]:
    message: JsonObject = {"role": "assistant"}
    texts = [str(p.get("text", "")) for p in group if p["type"] == "text"]
    message["content"] = "".join(texts) if texts else None
    if replay_reasoning:
        for p in group:
            fidelity = p.get("fidelity")
            if p["type"] == "thinking" and isinstance(fidelity, dict):
                field_name = fidelity.get("reasoning_field")
                if isinstance(field_name, str) and field_name:
                    message[field_name] = message.get(field_name, "") + str(p.get("thinking", ""))
    calls = [p for p in group if p["type"] == "tool_call"]
    if calls:
        message["tool_calls"] = [
            {
                "id": c.get("tool_call_id", ""),
                "type": "function",
                "function": {"name": c.get("name", ""), "arguments": c.get("arguments", "")},
            }
            for c in calls
        ]
    if message["content"] is None and not calls:
        message["content"] = ""
    turn = [message]
    images: list[JsonObject] = []
    for call in calls:
        call_id = str(call.get("tool_call_id", ""))
        output = outputs.get(call_id)
        text = str(output.get("output", "")) if output else INTERRUPTED
        turn.append({"role": "tool", "tool_call_id": call_id, "content": text})
        for url in (output or {}).get("images", []) or []:
            images.append({"type": "image_url", "image_url": {"url": url}})
    if images:
        # Tool messages carry text only; images follow as the user's next message.
        note = {"type": "text", "text": "[images returned by the tool calls above]"}
        turn.append({"role": "user", "content": [note, *images]})
    return turn


def _user_message(parts: list[JsonObject]) -> JsonObject:
    if all(p.get("type") == "text" for p in parts):
        return {"role": "user", "content": "\n\n".join(str(p.get("text", "")) for p in parts)}
    content: list[JsonObject] = []
    for p in parts:
        if p["type"] == "text":
            content.append({"type": "text", "text": p.get("text", "")})
        elif p["type"] == "image_url":
            content.append({"type": "image_url", "image_url": {"url": p.get("image_url", "")}})
        elif p["type"] == "inline_data":
            url = f"data:{p.get('mime_type', '')};base64,{p.get('data', '')}"
            content.append({"type": "image_url", "image_url": {"url": url}})
    return {"role": "user", "content": content}
