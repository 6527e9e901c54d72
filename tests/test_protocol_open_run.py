"""OpenRun: the closing messages a run's own chain needs, for the hub's guard and
the relaying engines alike."""

from __future__ import annotations

from typing import Any

from omni_grpc.convert import message_from_dict
from omni_grpc.protocol import builders as b
from omni_grpc.protocol.open_run import OpenRun

T0 = "2026-01-01T00:00:00.000Z"


def kinds(messages: list[dict[str, Any]]) -> list[tuple[str, str | None]]:
    out = []
    for m in messages:
        p = m["payload"]
        out.append((p["type"], p.get("event_type") or p.get("status") or p.get("stop_reason")))
    return out


def test_closing_order_fragments_then_request_then_abort() -> None:
    run = OpenRun()
    for msg in (
        b.request_begin(timestamp=T0),
        b.partial_text("start", "hal", timestamp=T0),
        b.partial_thinking("start", "hm", timestamp=T0),
    ):
        run.observe(msg)
    assert run.unfinished
    closing = run.closing("aborted", abort_reason="stop please")
    assert kinds(closing) == [
        ("partial_text", "stop"),
        ("text", "aborted"),
        ("partial_thinking", "stop"),
        ("thinking", "aborted"),
        ("request_end", "aborted"),
        ("abort", None),
    ]
    assert closing[-1]["payload"]["reason"] == "stop please"
    assert not run.unfinished and run.abort_seen
    assert run.closing("aborted", abort_reason="again") == []  # one abort, once


def test_a_failure_between_requests_gets_a_request_of_its_own() -> None:
    run = OpenRun()
    closing = run.closing("failed", abort_reason="boom", error="boom", request_status="auth",
                          report_error=True)  # fmt: skip
    assert kinds(closing) == [("request_begin", None), ("request_end", "auth"), ("abort", None)]
    assert closing[1]["payload"]["error_message"] == "boom"
    # Without report_error nothing is invented.
    assert kinds(OpenRun().closing("failed", abort_reason="x", error="x")) == [("abort", None)]


def test_protobuf_messages_and_child_sessions() -> None:
    run = OpenRun()
    run.observe(message_from_dict(b.request_begin(timestamp=T0)))
    child = b.with_origin(b.request_begin(timestamp=T0), "sub")
    run.observe(message_from_dict(child))
    run.observe(message_from_dict(b.with_origin(b.abort_event("x", timestamp=T0), "sub")))
    assert run.request_open and not run.abort_seen  # the child's words are not the run's
    run.observe(message_from_dict(b.request_end("completed", timestamp=T0)))
    assert not run.unfinished
    run.observe(message_from_dict(b.abort_event("done", timestamp=T0)))
    assert run.abort_seen
