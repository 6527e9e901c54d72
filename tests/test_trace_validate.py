"""TraceValidator: each rule fires on a real violation, and the corpus is clean."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from omni_grpc import protocol as p
from omni_grpc.trace import read_jsonl
from omni_grpc.trace.validate import Issue, TraceValidator, validate_records

CORPUS = Path(__file__).parent / "conformance"
CLEAN = sorted(
    f for f in CORPUS.glob("*.jsonl") if "torn" not in f.name and not f.name.startswith("docs_")
)
T = "2026-01-01T00:00:00.000Z"


def run(messages: list[dict[str, Any]], trace: bool | None = None) -> list[Issue]:
    validator = TraceValidator(trace=trace)
    issues: list[Issue] = []
    for line, msg in enumerate(messages, 1):
        issues += validator.check(line, msg)
    return issues + validator.finish()


def codes(issues: list[Issue]) -> list[tuple[int, str]]:
    return [(i.line, i.code) for i in issues]


@pytest.mark.parametrize("path", CLEAN, ids=lambda f: f.name)
def test_the_corpus_is_clean(path: Path) -> None:
    assert list(validate_records(read_jsonl(path))) == []


def test_the_corpus_traces_are_detected_as_traces() -> None:
    v = TraceValidator()
    v.check(1, p.session_meta(p.session_meta_payload("s", "p", "m", 1, "", "/a", "/w")))
    assert v.trace is True
    v = TraceValidator()
    v.check(1, p.request_begin(timestamp=T))
    assert v.trace is False


def stream(*parts: dict[str, Any]) -> list[dict[str, Any]]:
    return list(parts)


def test_delta_without_start_and_unclosed_fragment() -> None:
    issues = run(stream(p.partial_text("delta", "a"), p.partial_thinking("start", "b")))
    assert codes(issues) == [(1, "no-start"), (1, "unclosed"), (2, "unclosed")]


def test_restart_while_open() -> None:
    issues = run(stream(p.partial_text("start"), p.partial_text("start")))
    assert (2, "restart") in codes(issues)


def test_complete_must_follow_the_stop_immediately() -> None:
    issues = run(
        stream(
            p.partial_text("start"),
            p.partial_text("delta", "hi"),
            p.partial_text("stop"),
            p.request_end("completed"),
            p.assistant_text("hi"),
        )
    )
    assert (4, "missing-complete") in codes(issues)
    assert "stop at line 3" in issues[0].message


def test_deltas_must_equal_the_complete_message() -> None:
    issues = run(
        stream(
            p.partial_tool_call("start", "f", "", "c1"),
            p.partial_tool_call("delta", "f", '{"a":', "c1"),
            p.partial_tool_call("stop", "", "", "c1"),
            p.tool_call("f", '{"a":2}', "c1"),
            p.tool_call_output("ok", "c1"),
        )
    )
    assert codes(issues) == [(4, "delta-mismatch")]
    assert "lines 1-3" in issues[0].message and "arguments" in issues[0].message


def test_stop_reason_of_the_stop_must_match() -> None:
    issues = run(
        stream(
            p.partial_text("start"),
            p.partial_text("stop", "x", stop_reason="timeout"),
            p.assistant_text("x"),
        )
    )
    assert codes(issues) == [(3, "delta-mismatch")]


def test_stream_ending_after_a_stop() -> None:
    issues = run(stream(p.partial_text("start"), p.partial_text("stop")))
    assert codes(issues) == [(2, "missing-complete")]


def test_tool_pairing() -> None:
    issues = run(
        stream(
            p.tool_call("f", "{}", "a"),
            p.tool_call_output("x", "zz"),
            p.tool_call_output("x", "a"),
            p.tool_call_output("x", "a"),
            p.approval_decision("allow", "a"),
            p.tool_call("f", "{}", "b"),
            p.tool_call("f", "{}", "b"),
            p.tool_call("f", "{", "c", stop_reason="malformed"),  # needs no output
        )
    )
    assert [(i.line, i.severity, i.code) for i in issues] == [
        (2, "error", "tool-pairing"),  # output for an unknown call
        (4, "error", "tool-pairing"),  # second output
        (5, "error", "approval"),  # approval after the output
        (7, "error", "tool-pairing"),  # id used twice
        (7, "warning", "tool-pairing"),  # b never got an output
    ]


def test_request_pairing() -> None:
    issues = run(
        stream(
            p.request_end("completed"),
            p.request_begin(),
            p.request_begin(),
        )
    )
    assert codes(issues) == [(1, "request-pairing"), (3, "request-pairing"), (3, "request-pairing")]
    assert issues[-1].severity == "warning"


def test_trace_rules() -> None:
    meta = p.session_meta(p.session_meta_payload("s", "p", "m", 1, "", "/a", "/w"))
    issues = run(
        [
            meta,
            p.partial_text("start"),
            p.partial_text("stop"),
            p.assistant_text(""),
            p.with_origin(p.request_begin(), "kid"),
            p.with_origin(p.request_end("completed"), "kid"),
        ]
    )
    assert codes(issues) == [
        (2, "partial-in-trace"),
        (3, "partial-in-trace"),
        (5, "origin-in-trace"),
        (6, "origin-in-trace"),
    ]
    assert codes(run([p.request_begin(), p.request_end("completed")], trace=True)) == [
        (1, "trace-start")
    ]


def test_unknown_kinds_and_values_are_warnings() -> None:
    future = {"timestamp": T, "type": "event_msg", "payload": {"type": "future_event"}}
    odd = p.request_end("exploded")
    issues = run([future, p.request_begin(), odd])
    assert [(i.line, i.severity, i.code) for i in issues] == [
        (1, "warning", "unknown-kind"),
        (3, "warning", "unknown-value"),
    ]


def test_origin_chains_are_checked_separately() -> None:
    child = [
        p.with_origin(m, "kid")
        for m in (p.partial_text("start"), p.partial_text("stop", "c"), p.assistant_text("c"))
    ]
    parent = [p.partial_text("start"), p.partial_text("stop", "p"), p.assistant_text("p")]
    interleaved = [child[0], parent[0], child[1], parent[1], child[2], parent[2]]
    assert run(interleaved) == []
