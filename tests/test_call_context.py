"""The call context and the one token check (#43 item 4).

Every transport asks the runtime's ``BearerCheck`` and answers its refusal
from the ``unauthenticated`` row; a Run's deadline reaches the runtime in a
``CallContext`` and a run still going when it passes is aborted with the
same reason whichever transport carried it. A fake ``Runtime`` behind the
Connect transport shows what a transport hands the runtime: the context, and
nothing of the token.
"""

from __future__ import annotations

import asyncio
import json
import struct
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, cast

import grpc
import httpx
import pytest
from connect_serving import serving

from omni_grpc.client import AgentClient
from omni_grpc.runtime.call_context import (
    BEARER,
    DEADLINE_REASON,
    MISSING_TOKEN,
    WRONG_TOKEN,
    BearerCheck,
    CallContext,
)
from omni_grpc.runtime.errors import STATUSES, CallEnded, ErrorCode, Unauthenticated
from omni_grpc.runtime.events import HubEvent
from omni_grpc.runtime.interface import RunRequest, Runtime
from omni_grpc.transport.connect.app import ConnectApp, ConnectConfig
from omni_grpc_proto.omni.v1 import agent_service_pb2 as pb
from omni_grpc_proto.omni.v1 import agent_service_pb2_grpc

TOKEN = "context-token"
UNAUTHENTICATED = STATUSES[ErrorCode.UNAUTHENTICATED]


def envelope(data: bytes) -> bytes:
    return struct.pack(">BI", 0, len(data)) + data


def test_bearer_check() -> None:
    check = BearerCheck(TOKEN)
    assert check.check(TOKEN) == BEARER
    with pytest.raises(Unauthenticated, match=MISSING_TOKEN):
        check.check(None)
    with pytest.raises(Unauthenticated, match=WRONG_TOKEN):
        check.check(TOKEN + "x")
    assert BearerCheck.credentials(f"bEaReR {TOKEN} ") == TOKEN
    assert BearerCheck.credentials(f"Basic {TOKEN}") is None
    assert BearerCheck.credentials("Bearer   ") is None
    with pytest.raises(ValueError):
        BearerCheck("")


async def test_one_token_check_on_every_transport(tmp_path: Path) -> None:
    """Missing and wrong tokens get the same reason on gRPC, the HTTP routes,
    Connect and A2A's JSON-RPC; the right one passes on each."""
    async with serving(tmp_path / "data", token=TOKEN) as served:
        for header, reason in ((None, MISSING_TOKEN), (f"Bearer {TOKEN}x", WRONG_TOKEN)):
            metadata = () if header is None else (("authorization", header),)
            async with grpc.aio.insecure_channel(served.grpc_target) as channel:
                stub = agent_service_pb2_grpc.AgentServiceStub(channel)
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await stub.ListSessions(pb.ListSessionsRequest(), metadata=metadata)
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
            assert refused.value.details() == reason

            headers = {} if header is None else {"authorization": header}
            async with httpx.AsyncClient(headers=headers, timeout=30) as http:
                routes = await http.get(served.base_url + "/api/sessions")
                assert routes.status_code == UNAUTHENTICATED.http
                assert routes.json()["error"]["code"] == UNAUTHENTICATED.http_code
                assert routes.json()["error"]["message"].startswith(reason)
                assert routes.headers["www-authenticate"] == "Bearer"

                connect = await http.post(
                    served.url("ListSessions"),
                    content=b"{}",
                    headers={"content-type": "application/json"},
                )
                assert connect.status_code == UNAUTHENTICATED.http
                assert connect.json()["code"] == "unauthenticated"
                assert connect.json()["message"] == reason

                a2a = await http.post(
                    served.base_url + "/a2a/jsonrpc",
                    json={"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}},
                )
                assert a2a.status_code == UNAUTHENTICATED.http

        right = {"authorization": f"Bearer {TOKEN}"}
        async with httpx.AsyncClient(headers=right, timeout=30) as http:
            assert (await http.get(served.base_url + "/api/sessions")).status_code == 200
            connect = await http.post(
                served.url("ListSessions"),
                content=b"{}",
                headers={"content-type": "application/json"},
            )
            assert connect.status_code == 200
        async with grpc.aio.insecure_channel(served.grpc_target) as channel:
            stub = agent_service_pb2_grpc.AgentServiceStub(channel)
            await stub.ListSessions(
                pb.ListSessionsRequest(), metadata=(("authorization", f"Bearer {TOKEN}"),)
            )


async def _last_message(served: Any, client: AgentClient, session_id: str) -> Any:
    # The deadline answers the client at once; the run's close is recorded
    # after it: read the history once the run has ended.
    async with asyncio.timeout(60):
        await served.server.hub.wait_idle(session_id)
    history = [m async for m in client.history(session_id)]
    return history[-1]


async def test_a_deadline_aborts_the_run_with_its_reason_on_grpc_and_connect(
    tmp_path: Path,
) -> None:
    """A run waiting for an approval outlives its call's deadline: on gRPC
    and on Connect it is aborted, and its abort says the deadline passed."""
    async with (
        serving(tmp_path / "data") as served,
        AgentClient(served.grpc_target) as client,
        httpx.AsyncClient(timeout=30) as http,
    ):
        async with grpc.aio.insecure_channel(served.grpc_target) as channel:
            stub = agent_service_pb2_grpc.AgentServiceStub(channel)
            request = pb.RunRequest(prompt="list my files", approval_mode=pb.APPROVAL_MODE_ASK)
            session_id = ""
            with pytest.raises(grpc.aio.AioRpcError) as ended:
                async for response in stub.Run(request, timeout=1.5):
                    session_id = session_id or response.session_id
            assert ended.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        last = await _last_message(served, client, session_id)
        assert last.HasField("abort") and last.abort.reason == DEADLINE_REASON

        r = await http.post(
            served.url("Run"),
            content=envelope(b'{"prompt": "list my files", "approvalMode": "APPROVAL_MODE_ASK"}'),
            headers={"content-type": "application/connect+json", "connect-timeout-ms": "1500"},
        )
        session_id = r.headers["omni-session-id"]
        last = await _last_message(served, client, session_id)
        assert last.HasField("abort") and last.abort.reason == DEADLINE_REASON


async def test_a_call_already_past_its_deadline_starts_no_run(tmp_path: Path) -> None:
    async with serving(tmp_path / "data") as served:
        hub = served.server.hub
        past = CallContext(deadline=0.0)
        assert past.expired and past.remaining() == 0.0
        with pytest.raises(CallEnded, match=DEADLINE_REASON):
            await hub.run(RunRequest(input=[]), past)
        assert await hub.list_sessions() == []


# ---- the seam: a fake Runtime behind a real transport --------------------------------


class Held:
    """A subscription with nothing to yield (the whole ``Subscription`` protocol)."""

    def __init__(self) -> None:
        self.closed = False
        self.observers: list[Callable[[HubEvent], None]] = []

    def __aiter__(self) -> AsyncIterator[HubEvent]:
        return self._events()

    async def _events(self) -> AsyncIterator[HubEvent]:
        return
        yield  # an async generator that ends at once

    async def next(self) -> HubEvent | None:
        return None

    def close(self) -> None:
        self.closed = True

    def observe(self, observer: Callable[[HubEvent], None]) -> None:
        self.observers.append(observer)


class FakeRuntime:
    """Only what Connect's Run calls; records the context it is given."""

    def __init__(self) -> None:
        self.contexts: list[CallContext | None] = []
        self.aborts: list[str | None] = []
        self.subscription = Held()

    @property
    def approval_policy(self) -> Any:
        from omni_grpc.runtime.interface import ApprovalPolicy
        from omni_grpc.vocabulary import ApprovalMode

        return ApprovalPolicy(ApprovalMode.ALLOW_ALL, (ApprovalMode.ALLOW_ALL,))

    async def run(
        self, request: RunRequest, context: CallContext | None = None
    ) -> tuple[str, Held]:
        self.contexts.append(context)
        return "0123456789abcdef0123456789abcdef", self.subscription

    async def abort(self, session_id: str, reason: str | None = None, kind: Any = None) -> bool:
        self.aborts.append(reason)
        return True


async def test_a_transport_hands_the_runtime_its_call_context() -> None:
    fake = FakeRuntime()
    app = ConnectApp(cast(Runtime, fake), ConnectConfig(auth_token=TOKEN))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
        headers = {
            "content-type": "application/connect+json",
            "connect-timeout-ms": "30000",
            "x-request-tag": "seam",
        }
        refused = await http.post(
            "/omni.v1.AgentService/Run", content=envelope(b'{"prompt": "hi"}'), headers=headers
        )
        # A streaming call's refusal is its end-of-stream message.
        flags, length = struct.unpack_from(">BI", refused.content)
        assert flags == 0x02
        assert json.loads(refused.content[5 : 5 + length])["error"]["code"] == "unauthenticated"
        assert fake.contexts == []  # refused before the runtime was called

        headers["authorization"] = f"Bearer {TOKEN}"
        r = await http.post(
            "/omni.v1.AgentService/Run", content=envelope(b'{"prompt": "hi"}'), headers=headers
        )
        assert r.status_code == 200
    [context] = fake.contexts
    assert context is not None and context.who == BEARER
    assert context.metadata["x-request-tag"] == "seam"
    assert "authorization" not in context.metadata  # the secret stays in the transport
    remaining = context.remaining()
    assert remaining is not None and 0 < remaining <= 30
    assert fake.subscription.closed  # the call's end closed its subscription
    # A stream that ended before its task end is a Run left early: aborted,
    # and not for its deadline, which is far off.
    assert fake.aborts == ["the Run call was cancelled"]
