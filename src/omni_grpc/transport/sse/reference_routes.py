"""The reference server's session routes beyond the core ones, as its web
client calls them (``packages/web/src/api/endpoints.ts``).

A bridge serves one project and one agent, both named ``default``
(``sessions.PROJECT_ID`` / ``AGENT_ID``): the reference client creates and
lists sessions under ``/api/projects/default/agents/default/sessions``; any
other project or agent is 404 ``project_not_found`` / ``agent_not_found``, the
reference's codes. A session keeps its own approval mode (``POST`` with
``approvalMode``, ``PATCH /api/sessions/{id}``), bounded by the operator's
``--allow-client-modes`` like a task's.

The routes a bridge has nothing behind answer what the reference answers for
a session that never used the feature: ``GET /goal`` is ``{"goal": null}``
(no goal mode), ``GET /processes`` is ``{"processes": []}`` (no background
processes), ``POST /retry-now`` is ``{"skipped": false}`` (no reconnect wait
to skip). ``PATCH`` refuses the fields it cannot keep (``thinkingLevel``,
``title``, ``archived``) by name rather than dropping them.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from omni_grpc.runtime.errors import ErrorCode
from omni_grpc.runtime.interface import Runtime
from omni_grpc.transport.sse.errors import ApiError, HttpRefusal
from omni_grpc.transport.sse.requests import (
    approval_mode,
    check_session_model,
    check_session_options,
    read_json,
)
from omni_grpc.transport.sse.sessions import AGENT_ID, PROJECT_ID, session_json

AGENT_SESSIONS = "/api/projects/{project}/agents/{agent}/sessions"
# PATCH fields of the reference a bridge has no place for.
_UNKEPT = ("thinkingLevel", "title", "archived")


async def create_session(hub: Runtime, body: dict[str, Any]) -> Response:
    """201 ``{"session"}`` for a SessionCreateRequest (both creation routes)."""
    check_session_options(body)
    check_session_model(body, hub.new_session_model())
    info = await hub.create_session(approval_mode(body))
    return JSONResponse({"session": session_json(info)}, status_code=201)


class ReferenceRoutes:
    def __init__(self, hub: Runtime, *, max_body_bytes: int) -> None:
        self.hub = hub
        self.max_body = max_body_bytes

    def routes(self) -> list[BaseRoute]:
        return [
            Route(AGENT_SESSIONS, self.create_agent_session, methods=["POST"]),
            Route(AGENT_SESSIONS, self.list_agent_sessions, methods=["GET"]),
            Route("/api/sessions/{sid}", self.patch_session, methods=["PATCH"]),
            Route("/api/sessions/{sid}/goal", self.goal, methods=["GET"]),
            Route("/api/sessions/{sid}/processes", self.processes, methods=["GET"]),
            Route("/api/sessions/{sid}/retry-now", self.retry_now, methods=["POST"]),
        ]

    async def create_agent_session(self, request: Request) -> Response:
        _check_agent(request)
        body = await read_json(request, self.max_body, required=False)
        return await create_session(self.hub, body)

    async def list_agent_sessions(self, request: Request) -> Response:
        _check_agent(request)
        infos = await self.hub.list_sessions()
        return JSONResponse({"sessions": [session_json(i) for i in infos]})

    async def patch_session(self, request: Request) -> Response:
        session_id = request.path_params["sid"]
        await self.hub.session_info(session_id)  # 404 before reading the body
        body = await read_json(request, self.max_body)
        for key in _UNKEPT:
            if key in body:
                raise ApiError(
                    ErrorCode.INVALID_REQUEST, f"{key}: a bridged session has no {key} to change"
                )
        mode = approval_mode(body)
        if mode is None:
            raise ApiError(HttpRefusal.NO_UPDATE, "No updatable field provided (approvalMode).")
        info = await self.hub.set_approval_mode(session_id, mode)
        return JSONResponse({"session": session_json(info)})

    async def goal(self, request: Request) -> Response:
        await self.hub.session_info(request.path_params["sid"])
        return JSONResponse({"goal": None})

    async def processes(self, request: Request) -> Response:
        await self.hub.session_info(request.path_params["sid"])
        return JSONResponse({"processes": []})

    async def retry_now(self, request: Request) -> Response:
        await self.hub.session_info(request.path_params["sid"])
        return JSONResponse({"skipped": False})


def _check_agent(request: Request) -> None:
    if request.path_params["project"] != PROJECT_ID:
        raise ApiError(
            HttpRefusal.PROJECT_NOT_FOUND, f"this server has one project: {PROJECT_ID!r}"
        )
    if request.path_params["agent"] != AGENT_ID:
        raise ApiError(HttpRefusal.AGENT_NOT_FOUND, f"this server has one agent: {AGENT_ID!r}")
