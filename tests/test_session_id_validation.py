"""One session-id rule for every entry point (issue 29, item 10).

Run refused a malformed ``session_id`` with INVALID_ARGUMENT; GetHistory,
Attach, Abort, Approve and DeleteSession looked it up instead, and a
100,000-character id came back as RESOURCE_EXHAUSTED (the NOT_FOUND text,
echoing the id, overflowed the trailers). Every gRPC method and every HTTP
route that names a session now answers INVALID_ARGUMENT / 400 naming the
field, with a short text that does not echo the id, on a real ``serve``.
"""

from __future__ import annotations

import asyncio
import string
from collections.abc import Callable

import grpc
import httpx
import pytest
from conftest import ServeProcess
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from omni_grpc.trace.paths import is_session_id
from omni_grpc_proto.omni.v1 import agent_service_pb2 as pb
from omni_grpc_proto.omni.v1 import agent_service_pb2_grpc, omni_pb2

LONG = "s" * 100_000


def grpc_calls(
    stub: agent_service_pb2_grpc.AgentServiceStub, session_id: str
) -> dict[str, Callable[[], object]]:
    """Each AgentService method that names a session, as one awaitable call."""

    async def streamed(call: grpc.aio.UnaryStreamCall) -> None:
        async for _ in call:
            pass

    return {
        "Run": lambda: streamed(stub.Run(pb.RunRequest(session_id=session_id, prompt="hi"))),
        "Attach": lambda: streamed(stub.Attach(pb.AttachRequest(session_id=session_id))),
        "GetHistory": lambda: streamed(
            stub.GetHistory(pb.GetHistoryRequest(session_id=session_id))
        ),
        "GetHistory(page)": lambda: streamed(
            stub.GetHistory(pb.GetHistoryRequest(session_id=session_id, page_size=5))
        ),
        "Abort": lambda: stub.Abort(pb.AbortRequest(session_id=session_id)),
        "Approve": lambda: stub.Approve(
            pb.ApproveRequest(
                session_id=session_id, tool_call_id="c1", decision=omni_pb2.DECISION_ALLOW
            )
        ),
        "DeleteSession": lambda: stub.DeleteSession(pb.DeleteSessionRequest(session_id=session_id)),
    }


async def refused_on_grpc(address: str, session_id: str) -> None:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = agent_service_pb2_grpc.AgentServiceStub(channel)
        for name, call in grpc_calls(stub, session_id).items():
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await call()  # type: ignore[misc]
            error = refused.value
            assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, (name, error.code())
            details = error.details() or ""
            assert details.startswith("session_id:"), (name, details)
            assert len(details) < 200, (name, len(details))


def http_routes(session_id: str) -> list[tuple[str, str, dict[str, object] | None]]:
    base = f"/api/sessions/{session_id}"
    return [
        ("GET", base, None),
        ("DELETE", base, None),
        ("POST", f"{base}/tasks", {"input": [{"type": "message", "content": "hi"}]}),
        ("GET", f"{base}/stream", None),
        ("GET", f"{base}/messages", None),
        ("POST", f"{base}/approvals/c1", {"decision": "allow"}),
        ("POST", f"{base}/abort", {}),
    ]


async def refused_on_http(address: str, session_id: str) -> None:
    async with httpx.AsyncClient(base_url=f"http://{address}", timeout=30) as http:
        for method, path, body in http_routes(session_id):
            reply = await http.request(method, path, json=body)
            assert reply.status_code == 400, (method, path, reply.status_code, reply.text[:200])
            error = reply.json()["error"]
            assert error["code"] == "invalid_request", (method, path, error)
            assert "session_id" in error["message"], (method, path, error)
        # The SSE dialect's run route takes the id in its body.
        reply = await http.post("/v1/runs", json={"session_id": session_id, "input": "hi"})
        assert reply.status_code == 400, reply.text[:200]


@pytest.mark.parametrize("bad", [LONG, "a" * 129, "../etc", "a b", "a.b", "ü"])
def test_every_grpc_method_refuses_a_malformed_session_id(
    serve_process: Callable[..., ServeProcess], bad: str
) -> None:
    served = serve_process("--no-http")
    asyncio.run(refused_on_grpc(served.grpc_address, bad))


@pytest.mark.parametrize("bad", ["a" * 129, "a.b", "a%20b", "%2E%2E"])
def test_every_http_route_refuses_a_malformed_session_id(
    serve_process: Callable[..., ServeProcess], bad: str
) -> None:
    served = serve_process()
    assert served.http_address is not None
    asyncio.run(refused_on_http(served.http_address, bad))


ID_CHARS = string.ascii_letters + string.digits + "_-"


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    session_id=st.text(min_size=1, max_size=300).filter(
        lambda s: not (len(s) <= 128 and all(c in ID_CHARS for c in s))
    )
)
async def test_any_id_outside_the_rule_is_refused_everywhere(
    grpc_target: str, session_id: str
) -> None:
    assert not is_session_id(session_id)
    await refused_on_grpc(grpc_target, session_id)


@given(st.text(alphabet=ID_CHARS, min_size=1, max_size=128))
def test_ids_inside_the_rule_pass(session_id: str) -> None:
    assert is_session_id(session_id)
