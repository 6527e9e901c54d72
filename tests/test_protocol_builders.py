"""The builders reproduce the reference bytes of every HEAD-generated corpus line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from omni_grpc import protocol as p

CORPUS = Path(__file__).parent / "conformance"
# Files written by the HEAD builders (legacy and docs files use older shapes).
HEAD_FILES = sorted(
    f.name
    for f in CORPUS.glob("*.jsonl")
    if f.name.startswith(("stream_", "trace_", "aggregated_", "goal_"))
)


def dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def rebuild(msg: dict[str, Any]) -> dict[str, Any]:
    """Calls the builder the reference would have called for ``msg``."""
    ts = msg["timestamp"]
    pl = msg["payload"]
    kind = "session_meta" if msg["type"] == "session_meta" else pl["type"]
    sr = pl.get("stop_reason", "completed")
    fid = pl.get("fidelity")
    out: dict[str, Any]
    if kind == "session_meta":
        out = p.session_meta(
            p.session_meta_payload(
                pl["session_id"],
                pl["provider"],
                pl["model_id"],
                pl["model_context_window"],
                pl["system_prompt"],
                pl["agent_state"],
                pl["workspace"],
                source=pl.get("source"),
            ),
            timestamp=ts,
        )
    elif kind == "text" and pl["role"] == "user":
        out = p.user_text(pl["text"], pl.get("sender"), timestamp=ts)
    elif kind == "text":
        out = p.assistant_text(pl["text"], stop_reason=sr, fidelity=fid, timestamp=ts)
    elif kind == "thinking":
        out = p.thinking(pl["thinking"], stop_reason=sr, fidelity=fid, timestamp=ts)
    elif kind == "tool_call":
        out = p.tool_call(
            pl["name"], pl["arguments"], pl["tool_call_id"], stop_reason=sr, timestamp=ts
        )
    elif kind == "tool_call_output":
        out = p.tool_call_output(
            pl["output"], pl["tool_call_id"], images=pl.get("images"), stop_reason=sr, timestamp=ts
        )
    elif kind == "image_url":
        out = p.image_url(pl["image_url"], stop_reason=sr, timestamp=ts)
    elif kind == "partial_text":
        out = p.partial_text(pl["event_type"], pl["text"], stop_reason=sr, timestamp=ts)
    elif kind == "partial_thinking":
        out = p.partial_thinking(pl["event_type"], pl["thinking"], stop_reason=sr, timestamp=ts)
    elif kind == "partial_tool_call":
        out = p.partial_tool_call(
            pl["event_type"],
            pl["name"],
            pl["arguments"],
            pl["tool_call_id"],
            stop_reason=sr,
            timestamp=ts,
        )
    elif kind == "partial_tool_call_output":
        out = p.partial_tool_call_output(
            pl["event_type"],
            pl["output"],
            pl["tool_call_id"],
            images=pl.get("images"),
            stop_reason=sr,
            timestamp=ts,
        )
    elif kind == "approval_decision":
        out = p.approval_decision(pl["decision"], pl["tool_call_id"], timestamp=ts)
    elif kind == "abort":
        out = p.abort_event(pl["reason"], timestamp=ts)
    elif kind == "request_begin":
        out = p.request_begin(timestamp=ts)
    elif kind == "request_end":
        out = p.request_end(
            pl["status"],
            error_message=pl.get("error_message"),
            attempt=pl.get("attempt"),
            retry_in_ms=pl.get("retry_in_ms"),
            timestamp=ts,
        )
    elif kind == "token_usage":
        out = p.token_usage(pl["session"], pl["request"], timestamp=ts)
    elif kind == "compaction_begin":
        out = p.compaction_begin(pl["reason"], pl["mode"], pl["context"], pl["turns"], timestamp=ts)
    elif kind == "compaction_end":
        out = p.compaction_end(
            pl["reason"],
            pl["mode"],
            pl["status"],
            attempt=pl.get("attempt"),
            error_message=pl.get("error_message"),
            timestamp=ts,
        )
    elif kind == "goal_finished":
        out = p.goal_finished(pl["outcome"], pl["rounds"], pl["tokens_used"], timestamp=ts)
    elif kind == "subagent":
        out = p.subagent_event(pl["session_id"], timestamp=ts)
    elif kind == "tool_list_ready":
        out = p.tool_list_ready(pl["tools"], timestamp=ts)
    elif kind == "mcp_connect_begin":
        out = p.mcp_connect_begin(pl["servers"], timestamp=ts)
    elif kind == "mcp_connect_end":
        results = [
            p.mcp_server_result(
                r["server"],
                r["transport"],
                r["status"],
                r["duration_ms"],
                tools=r.get("tools"),
                error=r.get("error"),
            )
            for r in pl["results"]
        ]
        out = p.mcp_connect_end(pl["status"], results, timestamp=ts)
    else:
        raise AssertionError(f"no builder for {kind}")
    for session_id in reversed(msg.get("origin", [])):
        out = p.with_origin(out, session_id)
    return out


def corpus_lines() -> list[tuple[str, int, str]]:
    cases = []
    for name in HEAD_FILES:
        lines = (CORPUS / name).read_text(encoding="utf-8").split("\n")
        for number, line in enumerate(lines, 1):
            try:
                json.loads(line)
            except ValueError:
                continue  # blank or torn lines
            cases.append((name, number, line))
    return cases


CASES = corpus_lines()


def test_corpus_has_the_head_files() -> None:
    assert len(HEAD_FILES) >= 15
    assert len(CASES) > 200


@pytest.mark.parametrize(("name", "number", "line"), CASES, ids=[f"{c[0]}:{c[1]}" for c in CASES])
def test_builders_reproduce_corpus_line(name: str, number: int, line: str) -> None:
    assert dumps(rebuild(json.loads(line))) == line


def test_origin_two_hops_fixture() -> None:
    expected = (CORPUS / "origin_two_hops.json").read_text(encoding="utf-8").strip()
    msg = p.assistant_text("deep", timestamp="2026-08-22T07:00:00.667Z")
    two_hops = p.with_origin(p.with_origin(msg, "session-inner"), "session-outer")
    assert dumps(two_hops) == expected
    assert list(two_hops) == ["timestamp", "type", "payload", "origin"]


def test_user_text_sender_is_last_and_user_is_omitted() -> None:
    ts = "2026-01-01T00:00:00.000Z"
    assert list(p.user_text("hi", "server", timestamp=ts)["payload"]) == [
        "type",
        "role",
        "text",
        "stop_reason",
        "sender",
    ]
    assert "sender" not in p.user_text("hi", "user", timestamp=ts)["payload"]
    assert "sender" not in p.user_text("hi", timestamp=ts)["payload"]


def test_omission_rules() -> None:
    ts = "2026-01-01T00:00:00.000Z"
    assert "fidelity" not in p.assistant_text("a", fidelity={}, timestamp=ts)["payload"]
    assert "images" not in p.tool_call_output("o", "c", images=[], timestamp=ts)["payload"]
    assert dumps(p.abort_event(timestamp=ts)["payload"]) == '{"type":"abort","reason":null}'
    assert dumps(p.request_end("failed", attempt=2, timestamp=ts)["payload"]) == (
        '{"type":"request_end","status":"failed","attempt":2}'
    )
    # request_end and compaction_end order their optional keys differently.
    end = p.request_end("failed", error_message="e", attempt=1, retry_in_ms=5, timestamp=ts)
    assert list(end["payload"])[2:] == ["error_message", "attempt", "retry_in_ms"]
    comp = p.compaction_end("context", "summarize", "failed", error_message="e", attempt=1)
    assert list(comp["payload"])[4:] == ["attempt", "error_message"]


def test_denied_tool_output_texts() -> None:
    call = p.tool_call("exec_command", "{}", "call_a", timestamp="2026-08-22T05:00:00.212Z")
    ts = "2026-08-22T05:00:00.318Z"
    forbidden = p.denied_tool_output(call, "forbidden", timestamp=ts)
    assert dumps(forbidden) == (
        '{"timestamp":"2026-08-22T05:00:00.318Z","type":"model_msg","payload":'
        '{"type":"tool_call_output","role":"user","output":"Tool call denied by policy.",'
        '"tool_call_id":"call_a","stop_reason":"aborted"}}'
    )
    denied = p.denied_tool_output(call["payload"], "deny", timestamp=ts)
    assert denied["payload"]["output"] == "Tool call denied by user."
    with pytest.raises(ValueError, match="allow"):
        p.denied_tool_output(call, "allow")


def test_token_counts_arithmetic() -> None:
    a = {"total": 10, "output": 3, "cache_write": 5, "cache_read": 2}
    assert list(p.add_token_counts(p.empty_token_counts(), a).values()) == [2, 5, 3, 10]
    assert p.add_token_counts(a, a) == {
        "cache_read": 4,
        "cache_write": 10,
        "output": 6,
        "total": 20,
    }
    usage = p.token_usage(a, p.empty_token_counts(), timestamp="t")["payload"]
    assert list(usage["session"]) == ["cache_read", "cache_write", "output", "total"]


def test_now_timestamp_has_the_javascript_iso_form() -> None:
    from datetime import UTC, datetime

    ts = p.now_timestamp()
    assert len(ts) == 24 and ts.endswith("Z") and ts[10] == "T" and ts[19] == "."
    parsed = datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    assert p.format_timestamp(parsed) == ts
    assert p.format_timestamp(datetime(2026, 8, 22, 2, 16, 0, 1999, tzinfo=UTC)) == (
        "2026-08-22T02:16:00.001Z"
    )
