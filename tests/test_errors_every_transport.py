"""Every runtime error code reads the same on every transport (#43 item 3).

One real server (gRPC, the HTTP routes, Connect, gRPC-Web and A2A's three
bindings on their real ports) over a runtime that refuses: for each code of
``runtime.errors``, the hub's ``run`` and ``list_sessions`` raise an error
with that code (the seam: every transport calls only these), and each
transport's answer is checked against the one table, ``STATUSES``:

- gRPC (Run, ListSessions) and gRPC-Web (ListSessions): the row's code;
- the HTTP routes (``POST /v1/runs``, ``GET /api/sessions``): the row's HTTP
  status and word;
- Connect: the code's name, sent as that same HTTP status on a unary call
  (the table's HTTP status is the code's own) and in the end of a stream;
- A2A (JSON-RPC, gRPC, HTTP+JSON): the A2A error derived from the row, as
  A2A's own mapping sends it, with the row's word and HTTP status in its data.
"""

from __future__ import annotations

import struct
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import orjson
import pytest
from a2a.types import a2a_pb2, a2a_pb2_grpc
from a2a.utils.errors import A2A_ERROR_MAPPING, JSON_RPC_ERROR_CODE_MAP
from a2a_support import http_url, start_server
from google.rpc import code_pb2

from omni_grpc.runtime.errors import (
    HTTP_STATUS_OF,
    STATUSES,
    ApprovalNotPending,
    BackendUnavailable,
    CallEnded,
    ErrorCode,
    EventsMissed,
    HubError,
    InvalidRequest,
    LimitExceeded,
    ModeNotAllowed,
    Overloaded,
    SessionBusy,
    SessionNotFound,
    StorageUnavailable,
    Unauthenticated,
)
from omni_grpc.server import OmniServer
from omni_grpc.transport.a2a.errors import a2a_class
from omni_grpc.transport.connect.errors import CODE_NAMES
from omni_grpc_proto.omni.v1 import agent_service_pb2 as pb
from omni_grpc_proto.omni.v1 import agent_service_pb2_grpc

# One error for each code (a code missing here fails the coverage test).
SAMPLES: dict[ErrorCode, HubError] = {
    ErrorCode.INVALID_REQUEST: InvalidRequest("input", "empty"),
    ErrorCode.SESSION_NOT_FOUND: SessionNotFound("s1"),
    ErrorCode.APPROVAL_NOT_FOUND: ApprovalNotPending("s1", "call-1"),
    ErrorCode.TASK_IN_PROGRESS: SessionBusy("s1"),
    ErrorCode.APPROVAL_MODE_NOT_ALLOWED: ModeNotAllowed("allow-all", ("ask",)),
    ErrorCode.TOO_MANY_SESSIONS: LimitExceeded("max_sessions", 3),
    ErrorCode.TOO_MANY_RUNS: LimitExceeded("max_runs", 2),
    ErrorCode.TOO_MANY_STREAMS: LimitExceeded("max_streams_per_session", 4, "s1"),
    ErrorCode.TOO_MANY_REQUESTS: Overloaded(97, 90, 120),
    ErrorCode.STORAGE_FULL: StorageUnavailable("No space left on device", exhausted=True),
    ErrorCode.STORAGE_UNAVAILABLE: StorageUnavailable("Read-only file system", exhausted=False),
    ErrorCode.UNAVAILABLE: BackendUnavailable("connection refused"),
    ErrorCode.EVENTS_MISSED: EventsMissed("s1", "ab12cd34-7", "ab12cd34-40"),
    ErrorCode.INTERNAL: HubError("a bug"),
    ErrorCode.UNAUTHENTICATED: Unauthenticated("invalid bearer token"),
    ErrorCode.CALL_ENDED: CallEnded("Run"),
}
A2A_HEADERS = {"A2A-Version": "1.0", "content-type": "application/json"}
A2A_MESSAGE = {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}


def test_every_code_has_a_sample_and_one_status() -> None:
    assert set(SAMPLES) == set(ErrorCode) == set(STATUSES)
    for code, error in SAMPLES.items():
        assert error.code is code
        row = STATUSES[code]
        # The HTTP status is the gRPC code's own, so Connect (whose unary
        # HTTP status is the code's, by its protocol) agrees with the routes.
        assert row.http == HTTP_STATUS_OF[row.grpc]


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[OmniServer]:
    started = await start_server(tmp_path / "data")
    yield started
    await started.stop()


def refusing(server: OmniServer, error: HubError, monkeypatch: pytest.MonkeyPatch) -> None:
    async def refuse(*_args: Any, **_kwargs: Any) -> Any:
        raise error

    monkeypatch.setattr(server.hub, "run", refuse)
    monkeypatch.setattr(server.hub, "list_sessions", refuse)


def frame(flags: int, payload: bytes) -> bytes:
    return struct.pack(">BI", flags, len(payload)) + payload


def frames(body: bytes) -> list[tuple[int, bytes]]:
    out = []
    while body:
        flags, size = struct.unpack(">BI", body[:5])
        out.append((flags, body[5 : 5 + size]))
        body = body[5 + size :]
    return out


async def grpc_codes(server: OmniServer) -> list[int]:
    assert server.grpc is not None
    async with grpc.aio.insecure_channel(server.grpc.address) as channel:
        stub = agent_service_pb2_grpc.AgentServiceStub(channel)
        codes = []
        with pytest.raises(grpc.aio.AioRpcError) as run:
            async for _ in stub.Run(pb.RunRequest(prompt="hi")):
                pass
        codes.append(run.value.code().value[0])
        with pytest.raises(grpc.aio.AioRpcError) as listed:
            await stub.ListSessions(pb.ListSessionsRequest())
        codes.append(listed.value.code().value[0])
    return codes


async def http_answers(http: httpx.AsyncClient) -> list[tuple[int, str]]:
    run = await http.post("/v1/runs", json={"prompt": "hi"})
    listed = await http.get("/api/sessions")
    return [(r.status_code, r.json()["error"]["code"]) for r in (run, listed)]


async def connect_answers(http: httpx.AsyncClient) -> tuple[tuple[int, str], str]:
    """A unary call's (HTTP status, code name), and a stream's end code name."""
    service = "/omni.v1.AgentService"
    unary = await http.post(
        f"{service}/ListSessions",
        content=b"{}",
        headers={"content-type": "application/json", "connect-protocol-version": "1"},
    )
    stream = await http.post(
        f"{service}/Run",
        content=frame(0, orjson.dumps({"prompt": "hi"})),
        headers={"content-type": "application/connect+json", "connect-protocol-version": "1"},
    )
    assert stream.status_code == 200
    [(_, end)] = [f for f in frames(stream.content) if f[0] & 0x02]
    return (unary.status_code, unary.json()["code"]), orjson.loads(end)["error"]["code"]


async def grpc_web_code(http: httpx.AsyncClient) -> int:
    answer = await http.post(
        "/omni.v1.AgentService/ListSessions",
        content=frame(0, pb.ListSessionsRequest().SerializeToString()),
        headers={"content-type": "application/grpc-web+proto", "x-grpc-web": "1"},
    )
    assert answer.status_code == 200
    if "grpc-status" in answer.headers:  # trailers-only: the status in the headers
        return int(answer.headers["grpc-status"])
    [(_, trailer)] = [f for f in frames(answer.content) if f[0] & 0x80]
    fields = dict(line.split(":", 1) for line in trailer.decode().split("\r\n") if line)
    return int(fields["grpc-status"].strip())


async def a2a_answers(server: OmniServer, http: httpx.AsyncClient) -> dict[str, Any]:
    base = http_url(server) + "/a2a"
    jsonrpc = await http.post(
        base + "/jsonrpc",
        content=orjson.dumps(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "SendMessage",
                "params": {"message": A2A_MESSAGE},
            }
        ),
        headers=A2A_HEADERS,
    )
    rest = await http.post(
        base + "/rest/message:send",
        content=orjson.dumps({"message": A2A_MESSAGE}),
        headers=A2A_HEADERS,
    )
    assert server.grpc is not None
    async with grpc.aio.insecure_channel(server.grpc.address) as channel:
        stub = a2a_pb2_grpc.A2AServiceStub(channel)
        request = a2a_pb2.SendMessageRequest(
            message=a2a_pb2.Message(
                message_id="m1", role=a2a_pb2.ROLE_USER, parts=[a2a_pb2.Part(text="hi")]
            )
        )
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.SendMessage(request, metadata=(("a2a-version", "1.0"),))
    return {
        "jsonrpc": jsonrpc.json()["error"],
        "rest": (rest.status_code, rest.json()["error"]),
        "grpc": refused.value.code().name,
    }


@pytest.mark.parametrize("code", list(ErrorCode), ids=str)
async def test_one_code_reads_the_same_on_every_transport(
    server: OmniServer, code: ErrorCode, monkeypatch: pytest.MonkeyPatch
) -> None:
    row = STATUSES[code]
    refusing(server, SAMPLES[code], monkeypatch)
    assert await grpc_codes(server) == [row.grpc, row.grpc]
    async with httpx.AsyncClient(base_url=http_url(server), timeout=30) as http:
        assert await http_answers(http) == [(row.http, row.http_code)] * 2
        unary, stream_end = await connect_answers(http)
        assert unary == (row.http, CODE_NAMES[row.grpc])
        assert stream_end == CODE_NAMES[row.grpc]
        assert await grpc_web_code(http) == row.grpc

        a2a = await a2a_answers(server, http)
    error = a2a_class(code)
    mapping = A2A_ERROR_MAPPING[error]
    ours = {"code": row.http_code, "httpStatus": str(row.http)}
    assert a2a["jsonrpc"]["code"] == JSON_RPC_ERROR_CODE_MAP[error]
    # (An invalid field's data names the field too.)
    assert ours.items() <= a2a["jsonrpc"]["data"][0]["metadata"].items()
    rest_status, rest_error = a2a["rest"]
    assert (rest_status, rest_error["status"]) == (mapping.http_code, mapping.grpc_status)
    assert ours.items() <= rest_error["details"][0]["metadata"].items()
    assert a2a["grpc"] == mapping.grpc_status


def test_the_codes_a2a_gets() -> None:
    """The derivation's outcome for the codes A2A clients already see."""
    names = {code: a2a_class(code).__name__ for code in ErrorCode}
    assert names[ErrorCode.SESSION_NOT_FOUND] == "TaskNotFoundError"
    for client_side in (
        ErrorCode.INVALID_REQUEST,
        ErrorCode.APPROVAL_NOT_FOUND,
        ErrorCode.TASK_IN_PROGRESS,
        ErrorCode.APPROVAL_MODE_NOT_ALLOWED,
        ErrorCode.EVENTS_MISSED,
    ):
        assert names[client_side] == "InvalidParamsError", client_side
    for server_side in (
        ErrorCode.TOO_MANY_RUNS,
        ErrorCode.STORAGE_FULL,
        ErrorCode.UNAVAILABLE,
        ErrorCode.INTERNAL,
    ):
        assert names[server_side] == "InternalError", server_side
    assert STATUSES[ErrorCode.INTERNAL].grpc == code_pb2.INTERNAL
