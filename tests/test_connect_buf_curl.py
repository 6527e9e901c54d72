"""Every AgentService method over Connect and gRPC-Web on the HTTP port,
called by ``buf curl`` (connect-go's client) with the project's proto as
its schema: streaming Run to ``task_state idle``, resume, approvals, the
errors with gRPC's codes."""

from __future__ import annotations

from pathlib import Path

import pytest
from connect_serving import buf_curl, serving

from omni_grpc.client import AgentClient
from omni_grpc.client.agent_client import RunStream
from omni_grpc.runtime.approvals import ApprovalMode
from omni_grpc.runtime.limits import Limits

PROTOCOLS = ["connect", "grpcweb"]
pytestmark = pytest.mark.parametrize("protocol", PROTOCOLS)


def _kinds(messages: list[dict[str, object]]) -> list[str]:
    out = []
    for m in messages:
        if "message" in m:
            payload = m["message"]
            assert isinstance(payload, dict)
            out.append(next(k for k in payload if k not in ("timestamp", "origin")))
        else:
            event = m["event"]
            assert isinstance(event, dict)
            out.append(next(iter(event)))
    return out


async def _first_ask(stream: RunStream) -> str:
    """Reads ``stream`` up to its first approval request; its tool call id."""
    async for event in stream:
        ev = event.server_event
        if ev is not None and ev.WhichOneof("kind") == "approval_request":
            return str(ev.approval_request.tool_call.tool_call.tool_call_id)
    raise AssertionError("the run asked for no approval")


def _idle(message: dict[str, object]) -> bool:
    event = message.get("event")
    return isinstance(event, dict) and event.get("taskState", {}).get("state") == (
        "SESSION_STATE_IDLE"
    )


async def test_run_streams_to_idle_and_the_session_is_listed(tmp_path: Path, protocol: str) -> None:
    async with serving(tmp_path / "data") as served:
        run = await buf_curl(protocol, served.url("Run"), {"prompt": "hi", "includeJson": True})
        assert run.returncode == 0, run.error
        assert _idle(run.messages[-1]) and not any(_idle(m) for m in run.messages[:-1])
        [session_id] = {m["sessionId"] for m in run.messages}
        assert _kinds(run.messages)[:2] == ["text", "taskState"]
        # The event ids are the hub's: gRPC's Attach resumes after any of them.
        ids = [m["eventId"] for m in run.messages]
        async with AgentClient(served.grpc_target) as client:
            replay = [e async for e in client.attach(session_id, ids[0], until_idle=True)]
            recorded = [line async for line in client.history_lines(session_id)]
        assert [e.event_id for e in replay] == ids[1:]
        # include_json: each message's exact trace bytes, in the trace's order.
        streamed = iter(m["json"].encode() for m in run.messages if "message" in m)
        missing = [
            line for line in recorded if b"session_meta" not in line and line not in streamed
        ]
        assert not missing and len(recorded) > 3

        listing = await buf_curl(protocol, served.url("ListSessions"), {})
        assert listing.returncode == 0
        [info] = listing.messages[0]["sessions"]
        assert info["sessionId"] == session_id and info["state"] == "SESSION_STATE_IDLE"

        hist = await buf_curl(protocol, served.url("GetHistory"), {"sessionId": session_id})
        assert hist.returncode == 0
        assert len(hist.messages) == len(recorded)


async def test_attach_resumes_after_an_event_id(tmp_path: Path, protocol: str) -> None:
    async with serving(tmp_path / "data") as served:
        run = await buf_curl(protocol, served.url("Run"), {"prompt": "hi"})
        session_id = run.messages[0]["sessionId"]
        cut = 3
        # Attach stays open while the session lives: a deadline ends it.
        attach = await buf_curl(
            protocol,
            served.url("Attach"),
            {"sessionId": session_id, "afterEventId": run.messages[cut - 1]["eventId"]},
            timeout=1.5,
        )
        assert attach.code == "deadline_exceeded", attach
        replayed = [m["eventId"] for m in attach.messages if m["eventId"]]
        # The replay is exactly what came after the id, in order; then the
        # attach's own unicast task_state (no event id) may follow.
        assert replayed[: len(run.messages) - cut] == [m["eventId"] for m in run.messages[cut:]]


async def test_approve_abort_and_delete_over_the_http_port(tmp_path: Path, protocol: str) -> None:
    async with serving(tmp_path / "data") as served, AgentClient(served.grpc_target) as client:
        stream = client.run("list my files", approval_mode="ask", detach_on_cancel=True)
        call_id = await _first_ask(stream)
        session_id = await stream.session()
        approve = await buf_curl(
            protocol,
            served.url("Approve"),
            {"sessionId": session_id, "toolCallId": call_id, "decision": "DECISION_ALLOW"},
        )
        assert approve.returncode == 0 and approve.messages == [{}], approve
        decided = [e async for e in stream]
        assert any(
            e.message is not None and e.message.HasField("approval_decision") for e in decided
        )
        # Approving again: the ask is gone, gRPC's NOT_FOUND.
        again = await buf_curl(
            protocol,
            served.url("Approve"),
            {"sessionId": session_id, "toolCallId": call_id, "decision": "DECISION_ALLOW"},
        )
        assert again.code == "not_found" and again.returncode == 5 * 8

        idle = await buf_curl(protocol, served.url("Abort"), {"sessionId": session_id})
        assert idle.messages == [{}]  # was_running false is the default: printed as {}
        deleted = await buf_curl(protocol, served.url("DeleteSession"), {"sessionId": session_id})
        assert deleted.returncode == 0
        gone = await buf_curl(protocol, served.url("Attach"), {"sessionId": session_id})
        assert gone.code == "not_found"


async def test_errors_carry_grpcs_codes(tmp_path: Path, protocol: str) -> None:
    async with serving(
        tmp_path / "data",
        approval_mode=ApprovalMode.ASK,
        client_modes=(ApprovalMode.ASK,),
        limits=Limits(max_streams_per_session=2),
    ) as served:
        empty = await buf_curl(protocol, served.url("Run"), {})
        assert empty.error is not None and empty.code == "invalid_argument"
        assert "input" in empty.error["message"]
        assert empty.error["details"][0]["type"] == "google.rpc.BadRequest"
        unknown = await buf_curl(protocol, served.url("Attach"), {"sessionId": "nope"})
        assert unknown.error is not None and "nope" in unknown.error["message"]
        assert unknown.code == "not_found"
        mode = await buf_curl(
            protocol, served.url("Run"), {"prompt": "hi", "approvalMode": "APPROVAL_MODE_ALLOW_ALL"}
        )
        assert mode.code == "permission_denied"
        async with AgentClient(served.grpc_target) as client:
            stream = client.run("list my files", detach_on_cancel=True)
            await _first_ask(stream)
            session_id = await stream.session()
            busy = await buf_curl(
                protocol, served.url("Run"), {"sessionId": session_id, "prompt": "again"}
            )
            assert busy.code == "aborted"
            # The Run and one Attach are the session's two allowed streams.
            attached = client.attach(session_id)
            await anext(attached)
            over = await buf_curl(protocol, served.url("Attach"), {"sessionId": session_id})
            assert over.error is not None and over.code == "resource_exhausted"
            assert over.error["details"][0]["type"] == "google.rpc.ErrorInfo"
            await attached.aclose()  # type: ignore[attr-defined]
            stream.cancel()


async def test_the_token_is_required(tmp_path: Path, protocol: str) -> None:
    async with serving(tmp_path / "data", token="s3cret") as served:
        missing = await buf_curl(protocol, served.url("ListSessions"), {})
        assert missing.code == "unauthenticated" and missing.returncode == 16 * 8
        wrong = await buf_curl(
            protocol, served.url("ListSessions"), {}, headers=["authorization: Bearer nope"]
        )
        assert wrong.code == "unauthenticated"
        ok = await buf_curl(
            protocol, served.url("ListSessions"), {}, headers=["authorization: Bearer s3cret"]
        )
        assert ok.returncode == 0 and ok.messages == [{}]
