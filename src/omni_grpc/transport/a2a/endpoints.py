"""The HTTP endpoints around the SDK's JSON-RPC dispatcher and the Agent Card.

The SDK's dispatcher decodes JSON-RPC with the standard library, which turns
JSON nested past Python's recursion limit into an internal error (-32603), and
answers every request, notifications too. JSON-RPC 2.0 says otherwise on both
(section 5: "The Server MUST NOT reply to a Notification"; section 5.1: -32700
"Invalid JSON was received by the server"), so the body is parsed here first,
with orjson (which refuses depth past 1,024 as invalid JSON, without
recursion), and the dispatcher gets the parsed value.

The card is served with a validator and a lifetime (A2A 1.0, section 8.6.1:
servers SHOULD send ``Cache-Control`` and ``ETag``): it changes only when the
server is restarted on other ports or names.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Awaitable, Callable
from email.utils import formatdate
from typing import Any

import orjson
from a2a.server.jsonrpc_models import JSONParseError
from a2a.server.request_handlers.response_helpers import (
    agent_card_to_dict,
    build_error_response,
)
from a2a.server.routes.jsonrpc_dispatcher import JsonRpcDispatcher
from a2a.types import a2a_pb2
from a2a.utils.error_handlers import build_rest_error_payload
from a2a.utils.errors import ContentTypeNotSupportedError, InvalidParamsError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import Receive, Scope, Send

from omni_grpc.transport import large_json
from omni_grpc.transport.http_checks import has_body, is_json_media

# Methods whose answer is a stream: as a notification there is no one to stream to.
_STREAMING = frozenset(
    {"SendStreamingMessage", "SubscribeToTask", "message/stream", "tasks/resubscribe"}
)
CARD_MAX_AGE = 300


# What the SDK's dispatcher logs with logger.exception (ERROR and a traceback)
# for a request the client got wrong; the client's answer already names it.
_CLIENT_MISTAKES = frozenset(
    {"Failed to parse request params", "Failed to validate base JSON-RPC request"}
)


class ClientMistakes(logging.Filter):
    """Turns the SDK's ERROR-with-traceback for a client's malformed request
    into one WARNING line naming the problem: an operator's ERRORs are the
    server's own faults, and a client sending junk must not flood them."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg in _CLIENT_MISTAKES and record.levelno > logging.WARNING:
            problem = record.exc_info[1] if record.exc_info else None
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            record.msg = f"{record.msg} (a client's request): %s"
            record.args = (problem,)
            record.exc_info = record.exc_text = None
        return True


def quiet_client_mistakes() -> None:
    """Installs ``ClientMistakes`` on the SDK's JSON-RPC logger, once."""
    logger = logging.getLogger(JsonRpcDispatcher.__module__)
    if not any(isinstance(f, ClientMistakes) for f in logger.filters):
        logger.addFilter(ClientMistakes())


class JsonRpcEndpoint:
    """The JSON-RPC binding's POST endpoint: parse, then the SDK's dispatcher."""

    def __init__(self, dispatcher: JsonRpcDispatcher) -> None:
        self.dispatcher = dispatcher

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        response = await self.handle(request)
        let_go_of_body(request)
        await response(scope, receive, send)

    async def handle(self, request: Request) -> Response:
        unsupported = media_problem(request)
        if unsupported is not None:
            return JSONResponse(build_error_response(None, unsupported))
        body = await request.body()
        try:
            parsed: Any = await large_json.loads(body)  # large: in another process
        except ValueError as exc:
            return JSONResponse(build_error_response(None, JSONParseError(message=str(exc))))
        # Starlette caches the decoded body here; the dispatcher's request.json()
        # then returns this value instead of decoding the body again.
        request._json = parsed
        refusal = _bad_status(parsed)
        if refusal is not None:
            return JSONResponse(build_error_response(parsed.get("id"), refusal))
        if _is_notification(parsed):
            if parsed.get("method") not in _STREAMING:
                await self.dispatcher.handle_requests(request)
            return Response(status_code=204)
        return await self.dispatcher.handle_requests(request)


def let_go_of_body(request: Request) -> None:
    """Drops the request's body and its parsed JSON, which Starlette caches on
    the Request, once the answer is made: the endpoint holds the Request
    until the answer is sent, a stream's answer lasts as long as its run, and
    for a large message these are two of its copies (the request itself is
    parsed into the SDK's proto by then)."""
    for cached in ("_body", "_json"):
        request.__dict__.pop(cached, None)


def media_problem(request: Request) -> ContentTypeNotSupportedError | None:
    """A body that is not JSON, refused unread: A2A's bindings carry JSON
    (section 9.1 and 11.1: "Content-Type: application/json for requests and
    responses"; 11's examples ``application/a2a+json``), and a body of another
    type is how a cross-site "simple" POST gets past CORS (the HTTP port's
    guard leaves these paths to this check so the client gets A2A's error:
    ContentTypeNotSupportedError, -32005, HTTP 415)."""
    content_type = request.headers.get("content-type", "")
    if not has_body(request.headers) or is_json_media(content_type):
        return None
    return ContentTypeNotSupportedError(
        f"the request body must be application/json, not {content_type or 'untyped'!r}",
        {"field": "Content-Type"},
    )


def _bad_status(body: Any) -> InvalidParamsError | None:
    """ListTasks' ``status`` naming no TaskState. The SDK parses params leniently
    (an unknown enum name becomes TASK_STATE_UNSPECIFIED, i.e. no filter), so a
    misspelt filter would list every task; it is refused here instead."""
    if not isinstance(body, dict) or body.get("method") != "ListTasks":
        return None
    params = body.get("params")
    status = params.get("status") if isinstance(params, dict) else None
    return None if status is None else status_problem(status)


def status_problem(status: object) -> InvalidParamsError | None:
    """The refusal of a ``status`` filter that is no TaskState (by name or number)."""
    known = a2a_pb2.TaskState.keys() if isinstance(status, str) else a2a_pb2.TaskState.values()
    if status in known:
        return None
    return InvalidParamsError(f"status: {status!r} is not a TaskState", {"field": "status"})


def rest_list_tasks(
    endpoint: Callable[[Request], Awaitable[Response]],
) -> Callable[[Request], Awaitable[Response]]:
    """GET /tasks of the HTTP+JSON binding, its ``status`` query checked as above."""

    async def list_tasks(request: Request) -> Response:
        status = request.query_params.get("status")
        problem = None if status is None else status_problem(status)
        if problem is not None:
            return JSONResponse(build_rest_error_payload(problem), status_code=400)
        return await endpoint(request)

    return list_tasks


# A2A 1.0, section 5.4: the HTTP statuses where the SDK (1.3) answers 400 or 500.
_SPEC_STATUSES = {
    "CONTENT_TYPE_NOT_SUPPORTED": 415,
    "TASK_NOT_CANCELABLE": 409,
    "INVALID_AGENT_RESPONSE": 502,
}


def spec_statuses(
    endpoint: Callable[[Request], Awaitable[Response]],
) -> Callable[[Request], Awaitable[Response]]:
    """A REST endpoint of the SDK's whose error answers carry the spec's HTTP
    status (section 5.4's table), told by the ErrorInfo reason in the body; a
    body that is not JSON refused first (``media_problem``)."""

    async def answer(request: Request) -> Response:
        unsupported = media_problem(request)
        if unsupported is not None:
            payload = build_rest_error_payload(unsupported)
            payload["error"]["code"] = 415  # AIP-193: the HTTP status
            return JSONResponse(payload, status_code=415)
        response = _labelled(request, await endpoint(request))
        let_go_of_body(request)
        if response.status_code not in (400, 500) or not isinstance(response, JSONResponse):
            return response
        payload = orjson.loads(response.body)
        error = payload.get("error") if isinstance(payload, dict) else None
        if not isinstance(error, dict):
            return response
        details = error.get("details")
        reason = details[0].get("reason") if isinstance(details, list) and details else None
        status = _SPEC_STATUSES.get(reason) if isinstance(reason, str) else None
        if status is None:
            return response
        error["code"] = status
        return JSONResponse(payload, status_code=status, media_type=response.media_type)

    return answer


A2A_JSON = "application/a2a+json"


def _labelled(request: Request, response: Response) -> Response:
    """The SDK labels every HTTP+JSON answer ``application/a2a+json``; the
    spec says both that (its examples, and section 14.1.1's registration:
    "intended for the HTTP+JSON/REST binding") and, in the binding's own
    requirements (section 11.1), "Content-Type: ``application/json`` for
    requests and responses". So a client that names ``application/a2a+json``
    (its Accept or its body's Content-Type, as the SDK's client does) gets
    it, and any other gets ``application/json``: the same JSON either way."""
    label = response.headers.get("content-type", "")
    if not label.startswith(A2A_JSON):
        return response
    asked = request.headers.get("accept", "") + "," + request.headers.get("content-type", "")
    if A2A_JSON not in asked.lower():
        response.headers["content-type"] = "application/json" + label[len(A2A_JSON) :]
    return response


def _is_notification(body: Any) -> bool:
    """A JSON-RPC 2.0 request without an ``id`` member (section 4.1)."""
    return (
        isinstance(body, dict)
        and body.get("jsonrpc") == "2.0"
        and isinstance(body.get("method"), str)
        and "id" not in body
    )


class CardEndpoint:
    """GET of the Agent Card, with ``ETag`` (a hash of its bytes) and ``Cache-Control``."""

    def __init__(self, card: Callable[[], a2a_pb2.AgentCard]) -> None:
        self.card = card
        # The card is built on demand (the ports are known once bound); the
        # first time it is served is when this server's card came to be.
        self._since: tuple[bytes, str] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        body = orjson.dumps(agent_card_to_dict(self.card()))
        etag = '"' + hashlib.sha256(body).hexdigest()[:32] + '"'
        if self._since is None or self._since[0] != body:
            self._since = (body, formatdate(usegmt=True))
        headers = {
            "Cache-Control": f"public, max-age={CARD_MAX_AGE}",
            "ETag": etag,
            "Last-Modified": self._since[1],
        }
        wanted = request.headers.get("if-none-match", "")
        if etag in {tag.strip().removeprefix("W/") for tag in wanted.split(",")} or wanted == "*":
            response: Response = Response(status_code=304, headers=headers)
        else:
            response = Response(body, media_type="application/json", headers=headers)
        await response(scope, receive, send)
