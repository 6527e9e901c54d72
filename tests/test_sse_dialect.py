"""The Omni SSE dialect projection: one run's messages -> the six seed events."""

from __future__ import annotations

from typing import Any

import pytest

from omni_grpc.transport.sse.dialect import DialectProjection, parse_tool_arguments
from omni_grpc.vocabulary import AbortKind
from omni_grpc_proto.omni.v1 import omni_pb2 as pb

A = pb.ROLE_ASSISTANT
U = pb.ROLE_USER


def partial_text(event_type: int, text: str) -> pb.OmniMessage:
    return pb.OmniMessage(partial_text=pb.PartialText(role=A, event_type=event_type, text=text))


def text(t: str, role: int = A, origin: list[str] | None = None) -> pb.OmniMessage:
    return pb.OmniMessage(text=pb.Text(role=role, text=t), origin=origin or [])


def thinking(t: str) -> pb.OmniMessage:
    return pb.OmniMessage(thinking=pb.Thinking(role=A, thinking=t))


def tool_call(name: str, args: str, call_id: str) -> pb.OmniMessage:
    return pb.OmniMessage(
        tool_call=pb.ToolCall(role=A, name=name, arguments=args, tool_call_id=call_id)
    )


def tool_output(out: str, call_id: str) -> pb.OmniMessage:
    return pb.OmniMessage(
        tool_call_output=pb.ToolCallOutput(role=U, output=out, tool_call_id=call_id)
    )


def usage(total: int, origin: list[str] | None = None) -> pb.OmniMessage:
    counts = pb.TokenCounts(total=total)
    return pb.OmniMessage(
        token_usage=pb.TokenUsage(session=counts, request=counts), origin=origin or []
    )


def request_end(status: int, error: str | None = None) -> pb.OmniMessage:
    end = pb.RequestEnd(status=status)
    if error is not None:
        end.error_message = error
    return pb.OmniMessage(request_end=end)


BEGIN = pb.OmniMessage(request_begin=pb.RequestBegin())
ABORT = pb.OmniMessage(abort=pb.Abort(reason="aborted by user"))


def project(msgs: list[pb.OmniMessage]) -> list[tuple[str, dict[str, Any]]]:
    p = DialectProjection("run_1")
    events = [ev for m in msgs for ev in p.feed(m)] + p.finish()
    return [(ev.event, ev.data) for ev in events]


def test_a_tool_turn_maps_to_the_seed_sequence() -> None:
    msgs = [
        BEGIN,
        pb.OmniMessage(
            partial_thinking=pb.PartialThinking(
                role=A, event_type=pb.EVENT_TYPE_DELTA, thinking="Plan"
            )
        ),
        thinking("Plan: search."),
        text("Let me look."),
        tool_call("search_memories", '{"query":"Project Phoenix"}', "call_123"),
        pb.OmniMessage(
            approval_decision=pb.ApprovalDecision(
                decision=pb.DECISION_ALLOW, tool_call_id="call_123"
            )
        ),
        usage(300),
        request_end(pb.STOP_REASON_COMPLETED),
        tool_output("Found 1 memory.", "call_123"),
        BEGIN,
        partial_text(pb.EVENT_TYPE_START, ""),
        partial_text(pb.EVENT_TYPE_DELTA, "Launch is "),
        partial_text(pb.EVENT_TYPE_DELTA, "September 1st."),
        partial_text(pb.EVENT_TYPE_STOP, ""),
        text("Launch is September 1st."),
        usage(42),
        request_end(pb.STOP_REASON_COMPLETED),
    ]
    assert project(msgs) == [
        ("thought", {"text": "Plan: search."}),
        ("message", {"delta": "Let me look."}),
        (
            "tool_call",
            {
                "tool": "search_memories",
                "call_id": "call_123",
                "args": {"query": "Project Phoenix"},
            },
        ),
        ("tool_result", {"call_id": "call_123", "result": "Found 1 memory."}),
        ("message", {"delta": "\n\nLaunch is "}),
        ("message", {"delta": "September 1st."}),
        ("done", {"run_id": "run_1", "total_tokens": 342, "status": "completed"}),
    ]


def test_a_text_never_streamed_becomes_one_delta_and_nothing_is_sent_twice() -> None:
    assert project([text("Hello!")]) == [
        ("message", {"delta": "Hello!"}),
        ("done", {"run_id": "run_1", "total_tokens": 0, "status": "completed"}),
    ]
    # A stream that fell short of its complete text: only the missing tail.
    events = project([partial_text(pb.EVENT_TYPE_DELTA, "Hel"), text("Hello")])
    assert [d for e, d in events if e == "message"] == [{"delta": "Hel"}, {"delta": "lo"}]
    # The start may carry content too.
    events = project(
        [partial_text(pb.EVENT_TYPE_START, "Hi"), partial_text(pb.EVENT_TYPE_STOP, ""), text("Hi")]
    )
    assert [d for e, d in events if e == "message"] == [{"delta": "Hi"}]


def test_user_input_subagents_and_compaction_summaries_are_not_the_reply() -> None:
    msgs = [
        text("what is up?", role=U),
        text("child says hi", origin=["child-1"]),
        usage(10, origin=["child-1"]),  # tokens still count for the run
        pb.OmniMessage(compaction_begin=pb.CompactionBegin(reason=pb.COMPACTION_REASON_CONTEXT)),
        partial_text(pb.EVENT_TYPE_DELTA, "[summary]"),
        text("[summary]"),
        pb.OmniMessage(compaction_end=pb.CompactionEnd(status=pb.STOP_REASON_COMPLETED)),
        text("Reply."),
        thinking(""),  # encrypted reasoning: nothing to show
    ]
    assert project(msgs) == [
        ("message", {"delta": "Reply."}),
        ("done", {"run_id": "run_1", "total_tokens": 10, "status": "completed"}),
    ]


def test_invalid_tool_arguments_become_an_empty_object_plus_the_raw_text() -> None:
    assert parse_tool_arguments('{"a": [1, 2]}') == ({"a": [1, 2]}, None)
    assert parse_tool_arguments("") == ({}, None)
    assert parse_tool_arguments('{"cmd": "ls') == ({}, '{"cmd": "ls')
    assert parse_tool_arguments("[1]") == ({}, "[1]")
    events = project([tool_call("x", "not json", "c1")])
    assert events[0] == (
        "tool_call",
        {"tool": "x", "call_id": "c1", "args": {}, "raw_args": "not json"},
    )


def test_retries_that_recover_are_not_errors() -> None:
    msgs = [
        BEGIN,
        request_end(pb.STOP_REASON_TIMEOUT, "socket closed"),
        BEGIN,
        text("ok"),
        request_end(pb.STOP_REASON_COMPLETED),
    ]
    assert [e for e, _ in project(msgs)] == ["message", "done"]
    assert project(msgs)[-1][1]["status"] == "completed"


def test_retries_that_run_out_end_with_error_then_done_failed() -> None:
    msgs = [BEGIN, request_end(pb.STOP_REASON_FAILED, "503 overloaded")]
    assert project(msgs) == [
        ("error", {"code": "failed", "message": "503 overloaded"}),
        ("done", {"run_id": "run_1", "total_tokens": 0, "status": "failed"}),
    ]
    # The engine's final abort after giving up does not hide the failure.
    msgs = [BEGIN, request_end(pb.STOP_REASON_MALFORMED), ABORT]
    assert project(msgs) == [
        ("error", {"code": "malformed", "message": "model request malformed"}),
        ("done", {"run_id": "run_1", "total_tokens": 0, "status": "failed"}),
    ]


def test_auth_failures_are_reported_at_once() -> None:
    events = project([BEGIN, request_end(pb.STOP_REASON_AUTH, "401 invalid x-api-key"), ABORT])
    assert events == [
        ("error", {"code": "auth", "message": "401 invalid x-api-key"}),
        ("done", {"run_id": "run_1", "total_tokens": 0, "status": "failed"}),
    ]


def feed_all(
    p: DialectProjection, msgs: list[tuple[pb.OmniMessage, AbortKind | None]]
) -> list[tuple[str, dict[str, Any]]]:
    out = [(e.event, e.data) for msg, kind in msgs for e in p.feed(msg, kind)]
    return out + [(e.event, e.data) for e in p.finish()]


@pytest.mark.parametrize("kind", [k for k in AbortKind if k.is_failure])
def test_an_abort_of_a_failure_kind_is_an_error(kind: AbortKind) -> None:
    crash = pb.OmniMessage(abort=pb.Abort(reason="upstream refused"))
    assert feed_all(DialectProjection("run_1"), [(BEGIN, None), (crash, kind)]) == [
        ("error", {"code": "engine_error", "message": "upstream refused"}),
        ("done", {"run_id": "run_1", "total_tokens": 0, "status": "failed"}),
    ]
    # No reason given: the kind's own words.
    bare = pb.OmniMessage(abort=pb.Abort())
    assert feed_all(DialectProjection("run_1"), [(bare, kind)])[0] == (
        "error",
        {"code": "engine_error", "message": kind.default_reason},
    )
    # After an auth failure the reference aborts with "llm request error": one error only.
    auth = [
        (BEGIN, None),
        (request_end(pb.STOP_REASON_AUTH, "401"), None),
        (pb.OmniMessage(abort=pb.Abort(reason="llm request error: 401")), kind),
    ]
    assert [e for e, _ in feed_all(DialectProjection("run_1"), auth)] == ["error", "done"]


@pytest.mark.parametrize("kind", [None, *(k for k in AbortKind if not k.is_failure)])
def test_an_abort_someone_asked_for_is_no_error_whatever_its_reason(
    kind: AbortKind | None,
) -> None:
    # The reason's words decide nothing: only the hub's kind does.
    for reason in ("engine error: looks like a failure", "llm request error: 401", ""):
        stop = pb.OmniMessage(abort=pb.Abort(reason=reason))
        assert feed_all(DialectProjection("run_1"), [(BEGIN, None), (stop, kind)]) == [
            ("done", {"run_id": "run_1", "total_tokens": 0, "status": "aborted"}),
        ]


def test_a_child_sessions_abort_is_not_the_runs() -> None:
    child = pb.OmniMessage(abort=pb.Abort(reason="x"), origin=["child"])
    events = feed_all(DialectProjection("run_1"), [(child, AbortKind.ENGINE_FAILURE)])
    assert events == [("done", {"run_id": "run_1", "total_tokens": 0, "status": "completed"})]


def test_user_abort_and_transport_failure_statuses() -> None:
    events = project(
        [
            BEGIN,
            partial_text(pb.EVENT_TYPE_DELTA, "Hal"),
            request_end(pb.STOP_REASON_ABORTED),
            ABORT,
        ]
    )
    assert events[-1] == ("done", {"run_id": "run_1", "total_tokens": 0, "status": "aborted"})
    p = DialectProjection("r")
    assert [(e.event, e.data) for e in p.fail("internal", "engine crashed")] == [
        ("error", {"code": "internal", "message": "engine crashed"})
    ]
    assert p.fail("internal", "again") == []  # one error per run
    assert [e.event for e in p.finish()] == ["done"]


def test_done_closes_the_stream_exactly_once() -> None:
    p = DialectProjection("r")
    assert len(p.finish()) == 1 and p.done
    assert p.finish() == []
    assert p.feed(text("late")) == []


def test_events_encode_as_named_frames_with_compact_json() -> None:
    p = DialectProjection("run_01")
    (ev,) = p.feed(text("héllo\nworld"))
    assert ev.encode() == 'event: message\ndata: {"delta":"héllo\\nworld"}\n\n'.encode()
    (done,) = p.finish()
    assert done.encode() == (
        b'event: done\ndata: {"run_id":"run_01","total_tokens":0,"status":"completed"}\n\n'
    )
