"""``GET /openapi.json`` and ``GET /docs``: what the HTTP port answers, as an
OpenAPI 3.1 document and a page that reads it.

The operations are described here, once, by hand (docs/sse.md says the same
in prose); the document served holds those of the routes this server
actually has, found by walking its Starlette routes, so a server without A2A
or metrics does not promise them. A route with no description still appears,
marked undescribed, and tests/test_openapi.py fails on it: the document
never leaves a served route out, nor lists one that is not served.

The page is the package's own renderer (``omni_grpc/web/docs.html`` and
``docs.js``): no CDN, so it works where the machine has no internet, under
the same Content-Security-Policy as the built-in page.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, Sequence
from functools import cache
from importlib import resources
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Mount, Route

from omni_grpc import __version__
from omni_grpc.vocabulary import (
    LAST_EVENT_ID_HEADER,
    LAST_EVENT_ID_PARAM,
    REFERENCE_ASK,
    SESSION_HEADER,
    ApprovalMode,
    Decision,
    ThinkingLevel,
)

JsonObject = dict[str, Any]

DOCUMENT_PATH, DOCS_PATH = "/openapi.json", "/docs"
# The page's own files: (path, name in omni_grpc/web, media type).
_DOCS_ASSETS = [
    (DOCS_PATH, "docs.html", "text/html; charset=utf-8"),
    ("/docs.js", "docs.js", "text/javascript; charset=utf-8"),
    ("/docs.css", "docs.css", "text/css; charset=utf-8"),
]
# A description of the API holds no data: served without the token, as the
# page's assets are (a client learns from it that it needs one).
PUBLIC_PATHS = frozenset({DOCUMENT_PATH, *(path for path, _, _ in _DOCS_ASSETS)})
UNDESCRIBED = "undescribed route"
# The page's policy (page.py): its own script, same-origin fetches, nothing else.
_HEADERS = {
    "cache-control": "no-store",
    "content-security-policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
}


# ---- reusable pieces ------------------------------------------------------------


def _ref(name: str) -> JsonObject:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: JsonObject, description: str) -> JsonObject:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _error(description: str) -> JsonObject:
    return _json(_ref("Error"), description)


def _sse(description: str) -> JsonObject:
    return {
        "description": description,
        "content": {"text/event-stream": {"schema": {"type": "string"}}},
    }


def _body(schema: JsonObject, *, required: bool = True) -> JsonObject:
    return {"required": required, "content": {"application/json": {"schema": schema}}}


def _path_param(name: str, description: str) -> JsonObject:
    return {
        "name": name,
        "in": "path",
        "required": True,
        "description": description,
        "schema": {"type": "string"},
    }


def _query(name: str, description: str, schema: JsonObject | None = None) -> JsonObject:
    return {
        "name": name,
        "in": "query",
        "required": False,
        "description": description,
        "schema": schema or {"type": "string"},
    }


_SID = _path_param("sid", "the session id")
_LAST_EVENT_ID = [
    {
        "name": LAST_EVENT_ID_HEADER,
        "in": "header",
        "required": False,
        "description": "resume after this event id",
        "schema": {"type": "string"},
    },
    _query(LAST_EVENT_ID_PARAM, f"the same as the {LAST_EVENT_ID_HEADER} header, for EventSource"),
]
_SESSION_ID_HEADER = {
    SESSION_HEADER: {"description": "the run's session id", "schema": {"type": "string"}}
}
_BAD = {"400": _error("a field is missing or wrong; the message names it")}
_UNKNOWN = {"404": _error("no such session (session_not_found)")}
# What approvalMode takes: our words and the reference's name for ask.
_MODES = [*(mode.value for mode in ApprovalMode), REFERENCE_ASK]

SCHEMAS: dict[str, JsonObject] = {
    "Error": {
        "type": "object",
        "required": ["error"],
        "properties": {
            "error": {
                "type": "object",
                "required": ["code", "message"],
                "properties": {"code": {"type": "string"}, "message": {"type": "string"}},
            }
        },
    },
    "SessionInfo": {
        "type": "object",
        "description": "The reference's SessionInfo (docs/sse.md).",
        "required": ["sessionId"],
        "properties": {
            "sessionId": {"type": "string"},
            "projectId": {"type": "string"},
            "agentId": {"type": "string"},
            "provider": {"type": "string"},
            "modelId": {"type": "string"},
            "workspace": {"type": "string"},
            "approvalMode": {"type": "string"},
            "status": {"type": "string"},
            "createdAt": {"type": "string"},
            "lastActiveAt": {"type": "string"},
            "pendingApprovalCount": {"type": "integer"},
            "hasTrace": {"type": "boolean"},
            "tracePath": {"type": "string"},
        },
        "additionalProperties": True,
    },
    "TaskInput": {
        "type": "object",
        "description": "What a task (or a dialect run) is given: input parts and/or a prompt.",
        "properties": {
            "prompt": {"type": "string", "minLength": 1},
            "input": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["type"],
                    "properties": {
                        "type": {"enum": ["text", "image_url", "file"]},
                        "text": {"type": "string"},
                        "imageUrl": {"type": "string"},
                        "path": {"type": "string"},
                        "dataUrl": {"type": "string"},
                    },
                },
            },
            "thinkingLevel": {"enum": [level.value for level in ThinkingLevel]},
            "approvalMode": {"enum": _MODES},
            "metadata": {"type": "object"},
        },
    },
    "SessionCreate": {
        "type": "object",
        "properties": {
            "provider": {"type": "string"},
            "modelId": {"type": "string"},
            "approvalMode": {"enum": _MODES},
        },
    },
}

_SESSION = _json(
    {"type": "object", "required": ["session"], "properties": {"session": _ref("SessionInfo")}},
    "the session",
)
_SESSIONS = _json(
    {
        "type": "object",
        "required": ["sessions"],
        "properties": {"sessions": {"type": "array", "items": _ref("SessionInfo")}},
    },
    "the sessions",
)
_PROJECT = [_path_param("project", "only `default`"), _path_param("agent", "only `default`")]
_A2A_TASK = _path_param("id", "the A2A task id")
_A2A_PUSH = _path_param("push_id", "the push notification config id")
_A2A_BODY = _body({"type": "object", "description": "the A2A binding's JSON (docs/a2a.md)"})
_A2A_JSON = _json({"type": "object"}, "the A2A binding's JSON answer")


def _op(summary: str, tag: str, responses: JsonObject, **more: Any) -> JsonObject:
    return {"summary": summary, "tags": [tag], "responses": responses, **more}


# ---- the operations: (path, method) -> OpenAPI operation -----------------------

REFERENCE, DIALECT, A2A, SERVER = "reference", "dialect", "a2a", "server"

OPERATIONS: dict[tuple[str, str], JsonObject] = {
    ("/api/sessions", "get"): _op("List sessions", REFERENCE, {"200": _SESSIONS}),
    ("/api/sessions", "post"): _op(
        "Create a session",
        REFERENCE,
        {"201": _SESSION, **_BAD},
        requestBody=_body(_ref("SessionCreate"), required=False),
    ),
    ("/api/projects/{project}/agents/{agent}/sessions", "get"): _op(
        "List sessions (the reference client's route)",
        REFERENCE,
        {"200": _SESSIONS, "404": _error("project_not_found / agent_not_found")},
        parameters=_PROJECT,
    ),
    ("/api/projects/{project}/agents/{agent}/sessions", "post"): _op(
        "Create a session (the reference client's route)",
        REFERENCE,
        {"201": _SESSION, **_BAD, "404": _error("project_not_found / agent_not_found")},
        parameters=_PROJECT,
        requestBody=_body(_ref("SessionCreate"), required=False),
    ),
    ("/api/sessions/{sid}", "get"): _op(
        "A session, with tracePath once it has a trace",
        REFERENCE,
        {"200": _SESSION, **_UNKNOWN},
        parameters=[_SID],
    ),
    ("/api/sessions/{sid}", "patch"): _op(
        "Change a session's approval mode",
        REFERENCE,
        {"200": _SESSION, **_BAD, **_UNKNOWN},
        parameters=[_SID],
        requestBody=_body({"type": "object", "properties": {"approvalMode": {"enum": _MODES}}}),
    ),
    ("/api/sessions/{sid}", "delete"): _op(
        "Delete a session (its running task is aborted first)",
        REFERENCE,
        {"204": {"description": "deleted"}, **_BAD, **_UNKNOWN},
        parameters=[
            _SID,
            _query(
                "deleteTrace", "remove the trace and workspace too", {"enum": ["true", "false"]}
            ),
        ],
    ),
    ("/api/sessions/{sid}/tasks", "post"): _op(
        "Start a task in a session; watch it on /stream",
        REFERENCE,
        {
            "202": _json({"type": "object"}, "`{sessionId, queued: false}`"),
            **_BAD,
            **_UNKNOWN,
            "409": _error("task_in_progress: the session is busy"),
        },
        parameters=[_SID],
        requestBody=_body(
            {"allOf": [_ref("TaskInput")], "properties": {"queueIfBusy": {"type": "boolean"}}}
        ),
    ),
    ("/api/sessions/{sid}/stream", "get"): _op(
        "The session's events as the reference's SSE stream",
        REFERENCE,
        {"200": _sse("`id:` event ids, `data:` the reference JSON of each event"), **_UNKNOWN},
        parameters=[_SID, *_LAST_EVENT_ID],
    ),
    ("/api/sessions/{sid}/messages", "get"): _op(
        "The recorded messages, each in the trace's exact bytes",
        REFERENCE,
        {
            "200": _json({"type": "object"}, "`{messages: [...]}` with each tracePosition"),
            **_BAD,
            **_UNKNOWN,
        },
        parameters=[
            _SID,
            _query("tailLimit", "only the newest N tasks", {"type": "integer", "minimum": 1}),
            _query("before", "the tasks before this `fileIndex:ordinal` cursor"),
            _query(
                "limit",
                "with before: how many tasks (default 200)",
                {"type": "integer", "minimum": 1},
            ),
        ],
    ),
    ("/api/sessions/{sid}/approvals/{call_id}", "post"): _op(
        "Answer a pending approval",
        REFERENCE,
        {
            "204": {"description": "answered"},
            **_BAD,
            "404": _error("approval_not_found: the call is not waiting (unknown or decided)"),
        },
        parameters=[_SID, _path_param("call_id", "the tool call id")],
        requestBody=_body(
            {
                "type": "object",
                "required": ["decision"],
                "properties": {"decision": {"enum": [Decision.ALLOW.value, Decision.DENY.value]}},
            }
        ),
    ),
    ("/api/sessions/{sid}/abort", "post"): _op(
        "Stop the session's running task",
        REFERENCE,
        {
            "202": {"description": "a task was running and is aborted"},
            "204": {"description": "the session was idle"},
            **_UNKNOWN,
        },
        parameters=[_SID],
        requestBody=_body(
            {"type": "object", "properties": {"reason": {"type": "string"}}}, required=False
        ),
    ),
    ("/api/sessions/{sid}/goal", "get"): _op(
        "Always `{goal: null}` (no goal mode)",
        REFERENCE,
        {"200": _json({"type": "object"}, "`{goal: null}`"), **_UNKNOWN},
        parameters=[_SID],
    ),
    ("/api/sessions/{sid}/processes", "get"): _op(
        "Always `{processes: []}` (no background processes)",
        REFERENCE,
        {"200": _json({"type": "object"}, "`{processes: []}`"), **_UNKNOWN},
        parameters=[_SID],
    ),
    ("/api/sessions/{sid}/retry-now", "post"): _op(
        "Always `{skipped: false}` (no reconnect wait to skip)",
        REFERENCE,
        {"200": _json({"type": "object"}, "`{skipped: false}`"), **_UNKNOWN},
        parameters=[_SID],
    ),
    ("/v1/runs", "post"): _op(
        "Run a prompt; the Omni SSE dialect streams it back",
        DIALECT,
        {
            "200": {
                **_sse(
                    "thought, message, tool_call, tool_result, approval_request, error, "
                    "then done (docs/sse.md)"
                ),
                "headers": _SESSION_ID_HEADER,
            },
            **_BAD,
            **_UNKNOWN,
            "409": _error("the session is busy, or the run is no longer buffered"),
        },
        parameters=_LAST_EVENT_ID,
        requestBody=_body(
            {
                "allOf": [_ref("TaskInput")],
                "properties": {
                    "session_id": {"type": "string"},
                    "sessionId": {"type": "string"},
                    "detach": {"type": "boolean", "description": "a hang-up leaves the run going"},
                },
            }
        ),
    ),
    ("/v1/runs", "get"): _op(
        "Resume a dropped dialect run after Last-Event-ID",
        DIALECT,
        {
            "200": {**_sse("the rest of the run"), "headers": _SESSION_ID_HEADER},
            **_BAD,
            **_UNKNOWN,
            "409": _error("resume_unavailable: no longer buffered"),
        },
        parameters=_LAST_EVENT_ID,
    ),
    ("/healthz", "get"): _op(
        "Whether the server can take runs (no token needed)",
        SERVER,
        {
            "200": _json({"type": "object"}, "`{status: SERVING}`"),
            "503": _json({"type": "object"}, "`{status: NOT_SERVING, problems}`"),
        },
    ),
    ("/metrics", "get"): _op(
        "Prometheus metrics (docs/monitoring.md)",
        SERVER,
        {
            "200": {
                "description": "the text exposition format",
                "content": {"text/plain": {"schema": {"type": "string"}}},
            }
        },
    ),
    ("/", "get"): _op("The built-in page", SERVER, {"200": {"description": "HTML"}}),
    ("/app.js", "get"): _op("The page's script", SERVER, {"200": {"description": "JavaScript"}}),
    ("/markdown.js", "get"): _op(
        "The page's Markdown renderer", SERVER, {"200": {"description": "JavaScript"}}
    ),
    ("/app.css", "get"): _op("The page's styles", SERVER, {"200": {"description": "CSS"}}),
    (DOCUMENT_PATH, "get"): _op(
        "This document", SERVER, {"200": _json({"type": "object"}, "OpenAPI 3.1")}
    ),
    (DOCS_PATH, "get"): _op(
        "A page that reads this document", SERVER, {"200": {"description": "HTML"}}
    ),
    ("/docs.js", "get"): _op("That page's script", SERVER, {"200": {"description": "JavaScript"}}),
    ("/docs.css", "get"): _op("That page's styles", SERVER, {"200": {"description": "CSS"}}),
    ("/.well-known/agent-card.json", "get"): _op(
        "The A2A agent card (no token needed)", A2A, {"200": _json({"type": "object"}, "AgentCard")}
    ),
    ("/a2a/jsonrpc", "post"): _op(
        "A2A over JSON-RPC 2.0 (message/send, message/stream, tasks/get ...)",
        A2A,
        {
            "200": {
                "description": "a JSON-RPC response, or an SSE stream for message/stream",
                "content": {
                    "application/json": {"schema": {"type": "object"}},
                    "text/event-stream": {"schema": {"type": "string"}},
                },
            }
        },
        requestBody=_body({"type": "object", "required": ["jsonrpc", "method"]}),
    ),
}
# The same endpoint with a trailing slash (the A2A TCK's client posts there):
# the same operation, not a redirect.
OPERATIONS["/a2a/jsonrpc/", "post"] = {
    **OPERATIONS["/a2a/jsonrpc", "post"],
    "summary": "A2A over JSON-RPC 2.0, at the path with a trailing slash",
}


def _a2a_rest() -> Iterator[tuple[tuple[str, str], JsonObject]]:
    """The A2A HTTP+JSON binding, in v1.0 (``/a2a/rest/v1``) and the 0.3
    paths (``/a2a/rest``) the SDK keeps for older clients."""
    ops: list[tuple[str, str, str, list[JsonObject], bool, JsonObject, tuple[str, ...]]] = [
        (
            "/message:send",
            "post",
            "Send a message; the task or message it makes",
            [],
            True,
            _A2A_JSON,
            ("v1", "v0.3"),
        ),
        (
            "/message:stream",
            "post",
            "Send a message and stream the task's updates",
            [],
            True,
            _sse("A2A stream responses"),
            ("v1", "v0.3"),
        ),
        ("/tasks", "get", "List tasks", [], False, _A2A_JSON, ("v0.3",)),
        ("/tasks/{id}", "get", "A task", [_A2A_TASK], False, _A2A_JSON, ("v1", "v0.3")),
        (
            "/tasks/{id}:cancel",
            "post",
            "Cancel a task",
            [_A2A_TASK],
            True,
            _A2A_JSON,
            ("v1", "v0.3"),
        ),
        (
            "/tasks/{id}:subscribe",
            "get",
            "Stream a task's updates",
            [_A2A_TASK],
            False,
            _sse("A2A stream responses"),
            ("v1", "v0.3"),
        ),
        (
            "/tasks/{id}:subscribe",
            "post",
            "Stream a task's updates",
            [_A2A_TASK],
            True,
            _sse("A2A stream responses"),
            ("v1", "v0.3"),
        ),
        (
            "/tasks/{id}/pushNotificationConfigs",
            "get",
            "Push notification configs (none)",
            [_A2A_TASK],
            False,
            _A2A_JSON,
            ("v1", "v0.3"),
        ),
        (
            "/tasks/{id}/pushNotificationConfigs",
            "post",
            "Set a push notification config (refused: push notifications are not supported)",
            [_A2A_TASK],
            True,
            _A2A_JSON,
            ("v1", "v0.3"),
        ),
        (
            "/tasks/{id}/pushNotificationConfigs/{push_id}",
            "get",
            "A push notification config",
            [_A2A_TASK, _A2A_PUSH],
            False,
            _A2A_JSON,
            ("v1", "v0.3"),
        ),
        (
            "/tasks/{id}/pushNotificationConfigs/{push_id}",
            "delete",
            "Delete a push notification config",
            [_A2A_TASK, _A2A_PUSH],
            False,
            _A2A_JSON,
            ("v0.3",),
        ),
        ("/card", "get", "The agent card", [], False, _A2A_JSON, ("v1",)),
        ("/extendedAgentCard", "get", "The extended agent card", [], False, _A2A_JSON, ("v0.3",)),
    ]
    prefixes = {"v1": "/a2a/rest/v1", "v0.3": "/a2a/rest"}
    for suffix, method, summary, params, has_body, ok, versions in ops:
        for version in versions:
            op = _op(
                f"{summary} (A2A {version})",
                A2A,
                {"200": ok, "default": _json({"type": "object"}, "an A2A error")},
            )
            if params:
                op["parameters"] = params
            if has_body:
                op["requestBody"] = _A2A_BODY
            yield (prefixes[version] + suffix, method), op


OPERATIONS.update(_a2a_rest())


# ---- what this server serves -----------------------------------------------------


def served(routes: Sequence[BaseRoute], prefix: str = "") -> Iterator[tuple[str, str]]:
    """(path, method) of every route, Mounts walked; HEAD, which Starlette
    adds to every GET, is left out as OpenAPI documents leave it."""
    for route in routes:
        if isinstance(route, Mount):
            yield from served(route.routes, prefix + route.path)
        elif isinstance(route, Route):
            for method in sorted(route.methods or ()):
                if method != "HEAD":
                    yield prefix + route.path, method.lower()


def document(routes: Sequence[BaseRoute]) -> JsonObject:
    """The OpenAPI 3.1 document of ``routes`` (this module's own included)."""
    paths: dict[str, JsonObject] = {}
    for path, method in served(routes):
        op = OPERATIONS.get((path, method))
        if op is None:
            op = {"summary": UNDESCRIBED, "responses": {"default": {"description": UNDESCRIBED}}}
        paths.setdefault(path, {})[method] = op
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "omni-grpc HTTP API",
            "version": __version__,
            "description": "The HTTP port of `omni-grpc serve`: the reference's session routes "
            "and SSE stream, the Omni SSE dialect (`/v1/runs`), the A2A bindings and the "
            "server's own routes. The same service over gRPC and Connect "
            "(`/omni.v1.AgentService/*` on this port) is described by proto/omni/v1 and by "
            "gRPC reflection, not here. docs/sse.md and docs/a2a.md say more.",
        },
        "paths": paths,
        "components": {
            "schemas": SCHEMAS,
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "The server's --auth-token, when it has one; also taken "
                    "as the access_token query parameter",
                }
            },
        },
        "tags": [
            {"name": REFERENCE, "description": "The reference server's routes (docs/sse.md)"},
            {"name": DIALECT, "description": "The Omni SSE dialect (docs/sse.md)"},
            {"name": A2A, "description": "The A2A bindings (docs/a2a.md)"},
            {"name": SERVER, "description": "Health, metrics, the page, this document"},
        ],
    }


@cache
def _asset(name: str) -> bytes:
    return resources.files("omni_grpc.web").joinpath(name).read_bytes()


def routes(app_routes: Sequence[BaseRoute]) -> list[BaseRoute]:
    """The document's and the page's routes, describing ``app_routes`` and
    themselves. The document is built on its first request, once (routes do
    not change while the server runs); ``servers`` says where the app is
    mounted, so a client joins the paths to the right prefix."""
    own: list[BaseRoute] = []
    built: list[JsonObject] = []

    async def openapi_json(request: Request) -> Response:
        if not built:
            built.append(document([*app_routes, *own]))
        root = request.scope.get("root_path", "") or "/"
        answer = {**built[0], "servers": [{"url": root}]}
        return Response(
            orjson.dumps(answer, option=orjson.OPT_INDENT_2), media_type="application/json"
        )

    def asset(name: str, media_type: str) -> Callable[[Request], Awaitable[Response]]:
        async def handler(_request: Request) -> Response:
            return Response(_asset(name), media_type=media_type, headers=_HEADERS)

        return handler

    own.append(Route(DOCUMENT_PATH, openapi_json, methods=["GET"]))
    own += [Route(p, asset(name, media), methods=["GET"]) for p, name, media in _DOCS_ASSETS]
    return own
