"""Bad A2A input gets A2A's error codes and leaves nothing behind: no session,
no trace, no event; and the token guards every binding but the card."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
from a2a.types import a2a_pb2 as a2a
from a2a_support import http_url, sdk_client, start_server, user_message

from omni_grpc.server import OmniServer
from omni_grpc.vocabulary import ApprovalMode

Start = Callable[..., Awaitable[OmniServer]]
# JSON-RPC 2.0's codes and A2A's own (the SDK's table).
PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS = -32700, -32600, -32601, -32602
TASK_NOT_FOUND, TASK_NOT_CANCELABLE, UNSUPPORTED = -32001, -32002, -32004


@pytest.fixture
async def a2a_server(tmp_path: Path) -> AsyncIterator[Start]:
    servers: list[OmniServer] = []

    async def start(**overrides: Any) -> OmniServer:
        server = await start_server(tmp_path / f"data{len(servers)}", **overrides)
        servers.append(server)
        return server

    yield start
    for server in reversed(servers):
        await server.stop()


async def rpc(server: OmniServer, body: bytes | dict[str, Any], **headers: str) -> dict[str, Any]:
    content = body if isinstance(body, bytes) else httpx.Request("POST", "/", json=body).content
    async with httpx.AsyncClient() as http:
        response = await http.post(
            http_url(server) + "/a2a/jsonrpc",
            content=content,
            headers={"content-type": "application/json", "A2A-Version": "1.0", **headers},
        )
    answer: dict[str, Any] = response.json()
    return answer


def send(message: dict[str, Any], metadata: dict[str, Any] | None = None) -> dict[str, Any]:
    params: dict[str, Any] = {"message": {"messageId": "m1", "role": "ROLE_USER", **message}}
    if metadata is not None:
        params["metadata"] = metadata
    return {"jsonrpc": "2.0", "id": 7, "method": "SendMessage", "params": params}


async def nothing_recorded(server: OmniServer) -> None:
    assert await server.hub.list_sessions() == []
    assert server.data_dir is not None
    assert (
        list((server.data_dir / "traces").rglob("*.jsonl")) == []
        if (server.data_dir / "traces").exists()
        else True
    )


async def test_malformed_json_and_unknown_methods_get_json_rpc_codes(a2a_server: Start) -> None:
    server = await a2a_server()
    assert (await rpc(server, b'{"jsonrpc": "2.0", "id": 1, "method": '))["error"][
        "code"
    ] == PARSE_ERROR
    unknown = await rpc(server, {"jsonrpc": "2.0", "id": 2, "method": "NoSuchMethod", "params": {}})
    assert unknown["error"]["code"] == METHOD_NOT_FOUND and unknown["id"] == 2
    not_rpc = await rpc(server, {"id": 3, "method": "SendMessage"})
    assert not_rpc["error"]["code"] == INVALID_REQUEST
    await nothing_recorded(server)


@pytest.mark.parametrize(
    ("message", "field"),
    [
        ({"parts": []}, "message.parts"),
        ({"parts": [{}]}, "message.parts[0]"),
        ({"parts": [{"text": "hi"}], "role": "ROLE_AGENT"}, "message.role"),
        ({"parts": [{"text": "hi"}], "role": "ROLE_UNSPECIFIED"}, "message.role"),
        ({"parts": [{"text": "hi"}], "contextId": "no-such-context"}, "message.contextId"),
        ({"parts": [{"text": "hi"}], "contextId": "not a valid id!"}, "message.contextId"),
    ],
)
async def test_a_bad_message_is_invalid_params_naming_the_field(
    a2a_server: Start, message: dict[str, Any], field: str
) -> None:
    server = await a2a_server()
    answer = await rpc(server, send(message))
    assert answer["error"]["code"] == INVALID_PARAMS, answer
    assert field in answer["error"]["message"]
    await nothing_recorded(server)


async def test_a_wider_approval_mode_than_the_operator_allows_is_refused(a2a_server: Start) -> None:
    server = await a2a_server(
        approval_mode=ApprovalMode.ASK, client_modes=(ApprovalMode.ASK, ApprovalMode.DENY_ALL)
    )
    wider = await rpc(server, send({"parts": [{"text": "hi"}]}, {"approvalMode": "allow-all"}))
    assert wider["error"]["code"] == INVALID_PARAMS
    assert "allow-all is not allowed" in wider["error"]["message"]
    assert wider["error"]["data"][0]["metadata"]["code"] == "approval_mode_not_allowed"
    unknown = await rpc(server, send({"parts": [{"text": "hi"}]}, {"approvalMode": "yolo"}))
    assert unknown["error"]["code"] == INVALID_PARAMS
    assert "metadata.approvalMode" in unknown["error"]["message"]
    await nothing_recorded(server)
    # A mode the operator allows runs.
    ok = await rpc(server, send({"parts": [{"text": "hi"}]}, {"approvalMode": "deny-all"}))
    assert ok["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"


@pytest.mark.parametrize("task_id", ["nope", "no-such-session:abc-1", "x:", ":abc-1", "s:abc-0"])
async def test_unknown_task_ids_are_task_not_found(a2a_server: Start, task_id: str) -> None:
    server = await a2a_server()
    for method in ("GetTask", "CancelTask"):
        answer = await rpc(
            server, {"jsonrpc": "2.0", "id": 1, "method": method, "params": {"id": task_id}}
        )
        assert answer["error"]["code"] == TASK_NOT_FOUND, (method, answer)
    answer = await rpc(server, send({"parts": [{"text": "hi"}], "taskId": task_id}))
    assert answer["error"]["code"] == TASK_NOT_FOUND
    await nothing_recorded(server)


async def test_a_task_id_of_a_known_session_but_no_such_run_is_task_not_found(
    a2a_server: Start,
) -> None:
    server = await a2a_server()
    done = await rpc(server, send({"parts": [{"text": "hi"}]}))
    task = done["result"]["task"]
    session, _, event_id = task["id"].partition(":")
    epoch = event_id.rsplit("-", 1)[0]
    for wrong in (f"{session}:{epoch}-3", f"{session}:{epoch}-999", f"{session}:other-1"):
        answer = await rpc(
            server, {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": wrong}}
        )
        assert answer["error"]["code"] == TASK_NOT_FOUND, wrong


async def test_a_finished_task_takes_no_message_and_no_cancel(a2a_server: Start) -> None:
    server = await a2a_server()
    done = await rpc(server, send({"parts": [{"text": "hi"}]}))
    task = done["result"]["task"]
    [session] = await server.hub.list_sessions()
    count = session.message_count
    answer = await rpc(server, send({"parts": [{"text": "more"}], "taskId": task["id"]}))
    assert answer["error"]["code"] == UNSUPPORTED
    cancel = await rpc(
        server, {"jsonrpc": "2.0", "id": 1, "method": "CancelTask", "params": {"id": task["id"]}}
    )
    assert cancel["error"]["code"] == TASK_NOT_CANCELABLE
    assert (await server.hub.session_info(session.session_id)).message_count == count


async def test_an_answer_without_a_decision_is_refused_and_the_task_still_waits(
    a2a_server: Start,
) -> None:
    server = await a2a_server(approval_mode=ApprovalMode.ASK)
    waiting = await rpc(server, send({"parts": [{"text": "hi"}]}))
    task = waiting["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    for parts, field in (
        ([{"text": "yes please"}], "message.parts"),
        ([{"data": {"decision": "maybe"}}], "message.parts[0].data.decision"),
        ([{"data": {"decision": "allow", "toolCallId": "call_other"}}], "approval"),
    ):
        answer = await rpc(server, send({"parts": parts, "taskId": task["id"]}))
        assert answer["error"]["code"] == INVALID_PARAMS, answer
        assert field in answer["error"]["message"]
    still = await rpc(
        server, {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": task["id"]}}
    )
    assert still["result"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    answered = await rpc(
        server, send({"parts": [{"data": {"decision": "deny"}}], "taskId": task["id"]})
    )
    assert answered["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"


async def test_push_notifications_are_not_offered(a2a_server: Start) -> None:
    server = await a2a_server()
    answer = await rpc(
        server,
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "CreateTaskPushNotificationConfig",
            "params": {"taskId": "t", "url": "http://127.0.0.1:9/hook"},
        },
    )
    assert answer["error"]["code"] == -32003  # PushNotificationNotSupported


async def test_the_token_guards_every_binding_but_the_card(a2a_server: Start) -> None:
    server = await a2a_server(auth_token="s3cret")
    async with httpx.AsyncClient() as http:
        card = (await http.get(http_url(server) + "/.well-known/agent-card.json")).json()
        refused = await http.post(
            http_url(server) + "/a2a/jsonrpc", json=send({"parts": [{"text": "hi"}]})
        )
        rest = await http.get(http_url(server) + "/a2a/rest/tasks")
    bearer = card["securitySchemes"]["bearer"]
    description = bearer["httpAuthSecurityScheme"]["description"]
    assert list(card["securitySchemes"]) == ["bearer"]
    assert bearer["httpAuthSecurityScheme"] == {"scheme": "Bearer", "description": description}
    # The same scheme in A2A 0.3's form, for 0.3 clients.
    assert (bearer["type"], bearer["scheme"]) == ("http", "Bearer")
    assert card["securityRequirements"] == [{"schemes": {"bearer": {}}}]
    assert refused.status_code == 401 and rest.status_code == 401
    assert server.grpc is not None
    async with grpc.aio.insecure_channel(server.grpc.address) as channel:
        call = channel.unary_unary(
            "/lf.a2a.v1.A2AService/ListTasks",
            request_serializer=a2a.ListTasksRequest.SerializeToString,
            response_deserializer=a2a.ListTasksResponse.FromString,
        )
        with pytest.raises(grpc.aio.AioRpcError) as refused_grpc:
            await call(a2a.ListTasksRequest())
    assert refused_grpc.value.code() == grpc.StatusCode.UNAUTHENTICATED
    await nothing_recorded(server)
    for binding in ("JSONRPC", "GRPC", "HTTP+JSON"):
        async with sdk_client(server, binding, token="s3cret") as client:
            events = [e async for e in client.send_message(user_message("hi"))]
        assert events[-1].status_update.status.state == a2a.TASK_STATE_COMPLETED


def test_serve_flags_name_the_agent_its_public_urls_or_turn_a2a_off(
    serve_process: Callable[..., Any], tmp_path: Path
) -> None:
    proxied = serve_process(
        "--a2a-name", "files-agent", "--a2a-description", "Lists files.",
        "--a2a-url", "https://agents.internal/files/", "--a2a-grpc-url", "agents.internal:443",
    )  # fmt: skip
    card = httpx.get(f"http://{proxied.http_address}/.well-known/agent-card.json").json()
    assert (card["name"], card["description"]) == ("files-agent", "Lists files.")
    assert {i["protocolBinding"]: i["url"] for i in card["supportedInterfaces"]} == {
        "JSONRPC": "https://agents.internal/files/a2a/jsonrpc",
        "HTTP+JSON": "https://agents.internal/files/a2a/rest",
        "GRPC": "agents.internal:443",
    }
    off = serve_process("--no-a2a", "--data-dir", str(tmp_path / "other"))
    assert httpx.get(f"http://{off.http_address}/.well-known/agent-card.json").status_code == 404
    assert httpx.post(f"http://{off.http_address}/a2a/jsonrpc", json={}).status_code == 404


async def test_a_message_to_a_busy_context_is_refused_and_recorded_nowhere(
    a2a_server: Start,
) -> None:
    server = await a2a_server(approval_mode=ApprovalMode.ASK)
    waiting = await rpc(server, send({"parts": [{"text": "hi"}]}))
    task = waiting["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    context = task["contextId"]
    window = await server.hub.replay_window(context)
    said = [e.message for e in window if e.message is not None]
    last = [m for m in said if not m.WhichOneof("payload").startswith("partial_")][-1]

    async def trace_caught_up() -> bool:
        # The trace is written behind the log, and the session's count behind
        # the trace: wait for the log's last message in both.
        traced = [m async for m in await server.hub.history(context)]
        count = (await server.hub.session_info(context)).message_count
        return traced[-1] == last and count == len(traced)

    deadline = asyncio.get_running_loop().time() + 30
    while not await trace_caught_up() and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.01)
    before = await server.hub.session_info(context)
    busy = await rpc(server, send({"parts": [{"text": "more"}], "contextId": context}))
    assert busy["error"]["code"] == INVALID_PARAMS
    assert busy["error"]["data"][0]["metadata"]["code"] == "task_in_progress"
    # No event, no trace line.
    after = await server.hub.session_info(context)
    assert [e.event_id for e in await server.hub.replay_window(context)] == [
        e.event_id for e in window
    ]
    assert (after.message_count, after.last_event_id) == (
        before.message_count,
        before.last_event_id,
    )
