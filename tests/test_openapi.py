"""``GET /openapi.json`` describes exactly the routes the HTTP port serves,
as a valid OpenAPI 3.1 document, and ``GET /docs`` reads it.

Real servers (``build_server``, as ``omni-grpc serve`` assembles them) are
asked over HTTP; their routes are walked from the Starlette app itself, so a
route added without a description, or a description left behind by a
removed route, fails here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from openapi_spec_validator import validate
from starlette.applications import Starlette

from omni_grpc.server import OmniServer, ServerConfig, build_server
from omni_grpc.transport.a2a import A2aConfig
from omni_grpc.transport.sse import openapi
from omni_grpc.transport.sse.transport import SseConfig, SseTransport

Start = Callable[..., Awaitable[OmniServer]]
METHODS = {"get", "post", "put", "patch", "delete"}


@pytest.fixture
async def start(tmp_path: Path) -> AsyncIterator[Start]:
    servers: list[OmniServer] = []

    async def start(**overrides: Any) -> OmniServer:
        http = overrides.pop("http", SseConfig(port=0))
        config = ServerConfig(data_dir=tmp_path / f"data{len(servers)}", grpc=None, http=http,
                              shutdown_grace=1.0, **overrides)  # fmt: skip
        server = build_server(config)
        await server.start()
        servers.append(server)
        return server

    yield start
    for server in reversed(servers):
        await server.stop()


def http_of(server: OmniServer) -> SseTransport:
    return next(t for t in server.transports if isinstance(t, SseTransport))


def starlette_app(server: OmniServer) -> Starlette:
    """The HTTP app under the listener (and under the Connect prefix's router)."""
    app: Any = http_of(server).server._config.app  # the app uvicorn was given
    while not isinstance(app, Starlette):
        app = app.app
    return app


def documented(doc: dict[str, Any]) -> set[tuple[str, str]]:
    return {(path, m) for path, item in doc["paths"].items() for m in item if m in METHODS}


async def fetch(server: OmniServer, path: str, **kwargs: Any) -> httpx.Response:
    async with httpx.AsyncClient(base_url=http_of(server).url, timeout=30) as client:
        return await client.get(path, **kwargs)


async def test_the_document_lists_every_served_route_and_no_other(start: Start) -> None:
    server = await start()
    answer = await fetch(server, "/openapi.json")
    assert answer.status_code == 200
    assert answer.headers["content-type"] == "application/json"
    doc = answer.json()
    validate(doc)  # OpenAPI 3.1, by openapi-spec-validator
    assert doc["openapi"] == "3.1.0"
    served = set(openapi.served(starlette_app(server).routes))
    assert documented(doc) == served
    undescribed = sorted(
        f"{m.upper()} {p}" for p, item in doc["paths"].items() for m, op in item.items()
        if op["summary"] == openapi.UNDESCRIBED
    )  # fmt: skip
    assert undescribed == [], "describe these in transport/sse/openapi.py"
    # Each hand-written description names a route this full server serves.
    assert set(openapi.OPERATIONS) - served == set()
    # The families the issue names are all there.
    paths = set(doc["paths"])
    for expected in ("/api/sessions/{sid}/stream", "/v1/runs", "/a2a/rest/v1/message:send",
                     "/a2a/jsonrpc", "/healthz", "/metrics", "/openapi.json", "/docs"):  # fmt: skip
        assert expected in paths, expected
    assert doc["servers"] == [{"url": "/"}]


async def test_a_server_without_a2a_or_metrics_does_not_promise_them(start: Start) -> None:
    server = await start(a2a=None, metrics=False)
    doc = (await fetch(server, "/openapi.json")).json()
    validate(doc)
    assert documented(doc) == set(openapi.served(starlette_app(server).routes))
    assert not [p for p in doc["paths"] if p.startswith(("/a2a", "/.well-known"))]
    assert "/metrics" not in doc["paths"]
    assert "/v1/runs" in doc["paths"]


async def test_the_document_and_its_page_need_no_token(start: Start) -> None:
    server = await start(http=SseConfig(port=0, auth_token="s3cret"), a2a=A2aConfig())
    assert (await fetch(server, "/api/sessions")).status_code == 401
    doc = await fetch(server, "/openapi.json")
    assert doc.status_code == 200
    assert doc.json()["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    page = await fetch(server, "/docs")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    # The page loads nothing from elsewhere: its script and styles are its own.
    assert "http" not in page.text.replace('href="openapi.json"', "")
    assert "script-src 'self'" in page.headers["content-security-policy"]
    for asset, kind in (("/docs.js", "text/javascript"), ("/docs.css", "text/css")):
        answer = await fetch(server, asset)
        assert answer.status_code == 200 and answer.headers["content-type"].startswith(kind)
        assert f'"{asset.lstrip("/")}"' in page.text


def test_an_undescribed_route_shows_up_marked() -> None:
    """The check above can fail: a route with no description is listed as such."""
    from starlette.responses import Response
    from starlette.routing import Mount, Route

    async def nothing(_request: object) -> Response:
        return Response()

    routes = [
        Route("/healthz", nothing),
        Mount("/x", routes=[Route("/y", nothing, methods=["PUT"])]),
    ]
    doc = openapi.document(routes)
    assert doc["paths"]["/healthz"]["get"]["summary"] != openapi.UNDESCRIBED
    assert doc["paths"]["/x/y"]["put"]["summary"] == openapi.UNDESCRIBED
    assert documented(doc) == {("/healthz", "get"), ("/x/y", "put")}  # HEAD left out


def answers_as_documented(
    doc: dict[str, Any], method: str, path: str, answer: httpx.Response
) -> None:
    """``answer``'s status is one the operation documents, and a JSON body
    validates against that status's schema (the $refs resolved in ``doc``)."""
    from jsonschema import Draft202012Validator
    from referencing import Registry, Resource
    from referencing.jsonschema import DRAFT202012

    op = doc["paths"][path][method]
    assert str(answer.status_code) in op["responses"], (method, path, answer.status_code)
    content = op["responses"][str(answer.status_code)].get("content", {})
    if "application/json" in content:
        registry = Registry().with_resource("urn:doc", Resource.from_contents(doc, DRAFT202012))
        schema = _rebased(content["application/json"]["schema"])
        Draft202012Validator(schema, registry=registry).validate(answer.json())


def _rebased(schema: Any) -> Any:
    """``#/components/...`` refs pointed at the document registered as urn:doc."""
    if isinstance(schema, dict):
        return {
            k: (f"urn:doc{v}" if k == "$ref" and v.startswith("#/") else _rebased(v))
            for k, v in schema.items()
        }
    if isinstance(schema, list):
        return [_rebased(v) for v in schema]
    return schema


async def test_real_answers_match_the_documented_ones(start: Start) -> None:
    """A few routes asked for real, right and wrong: each status is one the
    document lists, and each JSON body fits the schema it gives."""
    server = await start()
    doc = (await fetch(server, "/openapi.json")).json()
    async with httpx.AsyncClient(base_url=http_of(server).url, timeout=30) as http:

        async def check(method: str, path: str, url: str, **kwargs: Any) -> httpx.Response:
            answer = await http.request(method.upper(), url, **kwargs)
            answers_as_documented(doc, method, path, answer)
            return answer

        created = await check("post", "/api/sessions", "/api/sessions", json={})
        sid = created.json()["session"]["sessionId"]
        await check("post", "/api/sessions", "/api/sessions", json={"approvalMode": "sometimes"})
        await check("get", "/api/sessions", "/api/sessions")
        await check("get", "/api/sessions/{sid}", f"/api/sessions/{sid}")
        await check("get", "/api/sessions/{sid}", "/api/sessions/session-nope")
        await check(
            "patch", "/api/sessions/{sid}", f"/api/sessions/{sid}", json={"approvalMode": "ask"}
        )
        await check(
            "patch", "/api/sessions/{sid}", f"/api/sessions/{sid}", json={"approvalMode": 5}
        )
        await check("post", "/api/sessions/{sid}/abort", f"/api/sessions/{sid}/abort", json={})
        await check(
            "post", "/api/sessions/{sid}/approvals/{call_id}",
            f"/api/sessions/{sid}/approvals/call_x", json={"decision": "allow"},
        )  # fmt: skip
        await check("get", "/api/sessions/{sid}/messages", f"/api/sessions/{sid}/messages")
        await check("get", "/api/sessions/{sid}/messages", f"/api/sessions/{sid}/messages?limit=x")
        await check("get", "/api/sessions/{sid}/goal", f"/api/sessions/{sid}/goal")
        await check("get", "/v1/runs", "/v1/runs")  # no Last-Event-ID: 400
        await check(
            "post",
            "/v1/runs",
            "/v1/runs",
            json={"prompt": "hi", "session_id": sid, "approvalMode": "allow-all"},
        )
        await check("get", "/healthz", "/healthz")
        await check("delete", "/api/sessions/{sid}", f"/api/sessions/{sid}?deleteTrace=maybe")
        await check("delete", "/api/sessions/{sid}", f"/api/sessions/{sid}")
