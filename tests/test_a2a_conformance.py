"""What the official A2A TCK (a2aproject/a2a-tck, branch 1.0-dev) checks, and the
issue's points beside it, on every binding of a real server, with A2A 1.0's
own error table (section 5.4), so each point holds whatever the TCK's
version (tests/test_a2a_tck.py runs the vendored TCK itself).

Each check names the binding's own form of the error: a JSON-RPC code, an
HTTP status with an AIP-193 body, a gRPC status; all carry the ErrorInfo
reason A2A defines.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import httpx
import orjson
import pytest
from a2a.types import a2a_pb2 as a2a
from a2a.types import a2a_pb2_grpc
from a2a_support import http_url, start_server
from google.protobuf import json_format
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from omni_grpc.server import OmniServer
from omni_grpc.vocabulary import ApprovalMode

Start = Callable[..., Awaitable[OmniServer]]
BINDINGS = ["JSONRPC", "HTTP+JSON", "GRPC"]
V1 = {"A2A-Version": "1.0"}
# The REST path and HTTP method of each unary method, and the gRPC request type.
REST = {
    "SendMessage": ("POST", "/message:send"),
    "ListTasks": ("GET", "/tasks"),
    "GetTask": ("GET", "/tasks/{id}"),
    "CancelTask": ("POST", "/tasks/{id}:cancel"),
}
GRPC_REQUEST = {
    "SendMessage": a2a.SendMessageRequest,
    "ListTasks": a2a.ListTasksRequest,
    "GetTask": a2a.GetTaskRequest,
    "CancelTask": a2a.CancelTaskRequest,
    "CreateTaskPushNotificationConfig": a2a.TaskPushNotificationConfig,
}


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


class Answer:
    """One binding's answer: the result's JSON, or the error's code and reason."""

    def __init__(
        self, result: Any = None, code: int | str | None = None, reason: str | None = None
    ) -> None:
        self.result, self.code, self.reason = result, code, reason


async def call(server: OmniServer, binding: str, method: str, params: dict[str, Any]) -> Answer:
    """``method`` with ``params`` (A2A's JSON form) over ``binding``."""
    if binding == "JSONRPC":
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        async with httpx.AsyncClient(timeout=30) as http:
            got = (await http.post(http_url(server) + "/a2a/jsonrpc", json=body, headers=V1)).json()
        if "error" in got:
            error = got["error"]
            return Answer(code=error["code"], reason=(error.get("data") or [{}])[0].get("reason"))
        return Answer(result=got["result"])
    if binding == "HTTP+JSON":
        verb, path = REST[method]
        path = path.format(id=params.pop("id", ""))
        query = {k: str(v) for k, v in params.items()} if verb == "GET" else None
        async with httpx.AsyncClient(timeout=30) as http:
            response = await http.request(
                verb, http_url(server) + "/a2a/rest" + path,
                params=query, json=params if verb == "POST" else None, headers=V1,
            )  # fmt: skip
        got = response.json()
        if response.status_code >= 400:
            error = got["error"]
            # AIP-193: the HTTP status is error.code, the gRPC word error.status.
            assert error["code"] == response.status_code and isinstance(error["status"], str)
            return Answer(code=response.status_code, reason=error["details"][0]["reason"])
        return Answer(result=got)
    assert server.grpc is not None
    async with grpc.aio.insecure_channel(server.grpc.address) as channel:
        stub = a2a_pb2_grpc.A2AServiceStub(channel)  # type: ignore[no-untyped-call]
        request = json_format.ParseDict(params, GRPC_REQUEST[method]())
        try:
            reply = await getattr(stub, method)(request, metadata=(("a2a-version", "1.0"),))
        except grpc.aio.AioRpcError as exc:
            return Answer(code=exc.code().name, reason=_grpc_reason(exc))
    return Answer(result=json_format.MessageToDict(reply))


def _grpc_reason(exc: grpc.aio.AioRpcError) -> str | None:
    status = rpc_status.from_call(exc)
    if status is None:
        return None
    for detail in status.details:
        info = error_details_pb2.ErrorInfo()
        if detail.Unpack(info):
            return str(info.reason)
    return None


def message(**fields: Any) -> dict[str, Any]:
    return {
        "message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}], **fields}
    }


# The spec's code for each error on each binding (section 5.4).
CODES = {
    "INVALID_PARAMS": {"JSONRPC": -32602, "HTTP+JSON": 400, "GRPC": "INVALID_ARGUMENT"},
    "CONTENT_TYPE_NOT_SUPPORTED": {"JSONRPC": -32005, "HTTP+JSON": 415, "GRPC": "INVALID_ARGUMENT"},
    "TASK_NOT_CANCELABLE": {"JSONRPC": -32002, "HTTP+JSON": 409, "GRPC": "FAILED_PRECONDITION"},
    "PUSH_NOTIFICATION_NOT_SUPPORTED":
        {"JSONRPC": -32003, "HTTP+JSON": 400, "GRPC": "UNIMPLEMENTED"},
    "VERSION_NOT_SUPPORTED": {"JSONRPC": -32009, "HTTP+JSON": 400, "GRPC": "UNIMPLEMENTED"},
}  # fmt: skip


def refused(answer: Answer, binding: str, reason: str) -> None:
    assert (answer.code, answer.reason) == (CODES[reason][binding], reason), vars(answer)


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_part_of_a_type_the_agent_does_not_take_is_content_type_not_supported(
    a2a_server: Start, binding: str
) -> None:
    server = await a2a_server()
    for part in (
        {"raw": "dGNr", "mediaType": "application/x-unknown"},
        {"data": {"key": "value"}},
        {"url": "https://example.com/report.pdf", "mediaType": "application/pdf"},
    ):
        answer = await call(server, binding, "SendMessage", message(parts=[{"text": "x"}, part]))
        refused(answer, binding, "CONTENT_TYPE_NOT_SUPPORTED")
    assert await server.hub.list_sessions() == []  # nothing ran


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", None])
async def test_a_body_that_is_not_json_is_content_type_not_supported_unread(
    a2a_server: Start, content_type: str | None
) -> None:
    """A2A's bindings carry JSON; a body of another type (how a cross-site
    "simple" POST gets past CORS) is refused before it is read, in A2A's
    words: -32005 on JSON-RPC, 415 with an AIP-193 body on HTTP+JSON."""
    server = await a2a_server()
    body = orjson.dumps({"jsonrpc": "2.0", "id": 7, "method": "SendMessage", "params": message()})
    headers = {**V1, **({"content-type": content_type} if content_type else {})}
    async with httpx.AsyncClient(timeout=30) as http:
        for path in ("/a2a/jsonrpc", "/a2a/jsonrpc/"):
            got = await http.post(http_url(server) + path, content=body, headers=headers)
            assert got.status_code == 200, got.text
            error = got.json()["error"]
            assert error["code"] == -32005, error
            assert error["data"][0]["reason"] == "CONTENT_TYPE_NOT_SUPPORTED", error
        got = await http.post(
            http_url(server) + "/a2a/rest/message:send",
            content=orjson.dumps(message()),
            headers=headers,
        )
        assert got.status_code == 415, got.text
        error = got.json()["error"]
        assert (error["code"], error["status"]) == (415, "INVALID_ARGUMENT"), error
        assert error["details"][0]["reason"] == "CONTENT_TYPE_NOT_SUPPORTED", error
        # The rest of the port keeps its own guard and its own words.
        got = await http.post(http_url(server) + "/v1/runs", content=b"{}", headers=headers)
        assert got.status_code == 415
        assert got.json()["error"]["code"] == "unsupported_media_type"
    assert await server.hub.list_sessions() == []  # nothing ran


async def test_http_json_answers_in_the_media_type_the_client_names(a2a_server: Start) -> None:
    """Section 11.1 says "application/json for requests and responses", its
    examples and section 14.1.1 ``application/a2a+json``: a client naming the
    latter gets it, any other client the former."""
    server = await a2a_server()
    body = orjson.dumps(message())
    url = http_url(server) + "/a2a/rest/message:send"
    async with httpx.AsyncClient(timeout=30) as http:
        for sent, accept, label in [
            ("application/json", None, "application/json"),
            ("application/a2a+json", None, "application/a2a+json"),
            ("application/json", "application/a2a+json", "application/a2a+json"),
        ]:
            headers = {**V1, "content-type": sent, **({"accept": accept} if accept else {})}
            got = await http.post(url, content=body, headers=headers)
            assert got.status_code == 200, got.text
            assert got.headers["content-type"].split(";")[0] == label, (sent, accept)
            assert got.json()["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
        got = await http.get(http_url(server) + "/a2a/rest/tasks/nope:x", headers=V1)
        assert got.status_code == 404
        assert got.headers["content-type"].split(";")[0] == "application/json"


@pytest.mark.parametrize("binding", BINDINGS)
async def test_a_message_not_in_the_users_role_is_refused(a2a_server: Start, binding: str) -> None:
    server = await a2a_server()
    for role in ("ROLE_AGENT", "ROLE_UNSPECIFIED"):
        refused(
            await call(server, binding, "SendMessage", message(role=role)),
            binding,
            "INVALID_PARAMS",
        )
    assert await server.hub.list_sessions() == []


@pytest.mark.parametrize("binding", BINDINGS)
async def test_bad_history_lengths_and_status_filters_are_refused(
    a2a_server: Start, binding: str
) -> None:
    server = await a2a_server()
    done = await call(server, binding, "SendMessage", message())
    task = done.result["task"]
    for length in (-1, -5):
        got = await call(server, binding, "GetTask", {"id": task["id"], "historyLength": length})
        refused(got, binding, "INVALID_PARAMS")
        refused(await call(server, binding, "ListTasks", {"historyLength": length}), binding,
                "INVALID_PARAMS")  # fmt: skip
    # gRPC carries an enum as its number: one no TaskState has.
    bogus: str | int = 99 if binding == "GRPC" else "TASK_STATE_BOGUS"
    refused(await call(server, binding, "ListTasks", {"status": bogus}), binding, "INVALID_PARAMS")
    # The same filters, well formed, still work.
    listed = await call(server, binding, "ListTasks", {"status": "TASK_STATE_COMPLETED"})
    assert [t["id"] for t in listed.result["tasks"]] == [task["id"]]
    got = await call(server, binding, "GetTask", {"id": task["id"], "historyLength": 0})
    assert "history" not in got.result


@pytest.mark.parametrize("binding", BINDINGS)
async def test_list_tasks_of_a_context_that_matches_nothing_is_an_empty_list(
    a2a_server: Start, binding: str
) -> None:
    server = await a2a_server()
    await call(server, binding, "SendMessage", message())
    got = await call(server, binding, "ListTasks", {"contextId": "no-such-context"})
    assert got.result.get("tasks", []) == [] and got.code is None


@pytest.mark.parametrize("binding", BINDINGS)
async def test_cancel_of_an_ended_task_is_task_not_cancelable(
    a2a_server: Start, binding: str
) -> None:
    server = await a2a_server()
    task = (await call(server, binding, "SendMessage", message())).result["task"]
    refused(await call(server, binding, "CancelTask", {"id": task["id"]}), binding,
            "TASK_NOT_CANCELABLE")  # fmt: skip


async def test_grpc_push_notifications_are_unimplemented_and_versions_are_checked(
    a2a_server: Start,
) -> None:
    server = await a2a_server()
    push = {"taskId": "t", "url": "https://example.com/hook"}
    refused(await call(server, "GRPC", "CreateTaskPushNotificationConfig", push), "GRPC",
            "PUSH_NOTIFICATION_NOT_SUPPORTED")  # fmt: skip
    assert server.grpc is not None
    request = json_format.ParseDict(message(), a2a.SendMessageRequest())
    async with grpc.aio.insecure_channel(server.grpc.address) as channel:
        stub = a2a_pb2_grpc.A2AServiceStub(channel)  # type: ignore[no-untyped-call]
        for version in ("9.9", "0.3", "2.0"):
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await stub.SendMessage(request, metadata=(("a2a-version", version),))
            assert caught.value.code() == grpc.StatusCode.UNIMPLEMENTED
            assert _grpc_reason(caught.value) == "VERSION_NOT_SUPPORTED"
        # 1.0, with a patch level, and no header at all are served.
        for metadata in ((("a2a-version", "1.0.3"),), ()):
            reply = await stub.SendMessage(request, metadata=metadata)
            assert reply.task.status.state == a2a.TASK_STATE_COMPLETED
    assert len(await server.hub.list_sessions()) == 2  # the refused ones ran nothing


async def test_json_rpc_parse_errors_notifications_and_the_trailing_slash(
    a2a_server: Start, caplog: pytest.LogCaptureFixture
) -> None:
    server = await a2a_server()
    url = http_url(server) + "/a2a/jsonrpc"
    headers = {"content-type": "application/json", **V1}
    caplog.set_level(logging.WARNING)
    async with httpx.AsyncClient(timeout=30) as http:
        # Nested past the parser's limit (1,024), as arrays, objects or both.
        for depth in (1025, 5000, 100_000):
            for opener, closer in ((b"[", b"]"), (b'{"a":', b"}"), (b'[{"a":', b"}]")):
                nested = opener * depth + b"1" + closer * depth
                got = (await http.post(url, content=nested, headers=headers)).json()
                assert got["error"]["code"] == -32700 and got["id"] is None, (depth, opener)
        # A notification (no id) gets no reply, and is still carried out.
        note = {"jsonrpc": "2.0", "method": "SendMessage", "params": message()}
        answer = await http.post(url, json=note, headers=V1)
        assert (answer.status_code, answer.content) == (204, b"")
        assert len(await server.hub.list_sessions()) == 1
        # The trailing slash is the same endpoint (no redirect losing the body).
        slash = await http.post(url + "/", json={"jsonrpc": "2.0", "id": 3, "method": "SendMessage",
                                                 "params": message()}, headers=V1)  # fmt: skip
        assert slash.status_code == 200 and slash.json()["result"]["task"]["status"]["state"] == (
            "TASK_STATE_COMPLETED"
        )
        # Requests a client got wrong are answered, and logged without an ERROR.
        for junk in (
            {
                "jsonrpc": "2.0",
                "id": 4,
                "method": "SendMessage",
                "params": {"message": {"parts": "x"}},
            },
            {"jsonrpc": "2.0", "id": {}, "method": "GetTask"},
            [1, 2],
            {"jsonrpc": "2.0", "id": 5, "method": "GetTask", "params": {"id": 5}},
        ):
            got = (await http.post(url, json=junk, headers=V1)).json()
            assert got["error"]["code"] in (-32600, -32602), junk
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [], [r.getMessage() for r in errors]
    assert not any(r.exc_info for r in caplog.records if r.name.startswith("a2a"))


async def test_the_card_has_a_validator_and_a_lifetime(a2a_server: Start) -> None:
    server = await a2a_server()
    url = http_url(server) + "/.well-known/agent-card.json"
    async with httpx.AsyncClient(timeout=30) as http:
        first = await http.get(url)
        again = await http.get(url)
        fresh = await http.get(url, headers={"If-None-Match": first.headers["etag"]})
        stale = await http.get(url, headers={"If-None-Match": '"something-else"'})
    assert "max-age=" in first.headers["cache-control"]
    assert first.headers["etag"].startswith('"') and first.headers["etag"] == again.headers["etag"]
    assert first.headers["last-modified"] == again.headers["last-modified"]
    assert (fresh.status_code, fresh.content) == (304, b"")
    assert stale.status_code == 200 and stale.json() == first.json()


async def test_a_message_stream_closes_where_the_task_waits_for_input(a2a_server: Start) -> None:
    """Over raw JSON-RPC SSE, as a client that reads to the stream's end."""
    server = await a2a_server(approval_mode=ApprovalMode.ASK)
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage",
            "params": message(parts=[{"text": "list my files"}])}  # fmt: skip
    async with httpx.AsyncClient(timeout=30) as http:
        response = await http.post(http_url(server) + "/a2a/jsonrpc", json=body, headers=V1)
    states = [
        line
        for line in response.text.splitlines()
        if '"state"' in line and line.startswith("data:")
    ]
    assert states and "TASK_STATE_INPUT_REQUIRED" in states[-1]
    # The task is not over: it waits for the answer.
    (session,) = await server.hub.list_sessions()
    assert session.session_id in response.text
