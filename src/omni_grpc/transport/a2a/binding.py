"""The A2A bindings the server mounts: JSON-RPC and HTTP+JSON routes and the card
on the HTTP port, the A2A gRPC service on the gRPC port, all over one handler.

The SDK's front ends do the decoding, the error codes and the SSE framing of
each binding (they are the reference for A2A's wire forms); ``HubRequestHandler``
answers them from the hub.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import grpc
from a2a.server.routes.jsonrpc_dispatcher import JsonRpcDispatcher
from a2a.server.routes.rest_routes import create_rest_routes
from a2a.types import a2a_pb2, a2a_pb2_grpc
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH
from starlette.routing import BaseRoute, Mount, Route

from omni_grpc.runtime.interface import Runtime
from omni_grpc.transport.a2a.card import (
    A2A_PREFIX,
    JSONRPC_SUFFIX,
    REST_SUFFIX,
    CardFacts,
    Skill,
    agent_card,
)
from omni_grpc.transport.a2a.endpoints import (
    CardEndpoint,
    JsonRpcEndpoint,
    quiet_client_mistakes,
    rest_list_tasks,
    spec_statuses,
)
from omni_grpc.transport.a2a.grpc_service import A2aGrpcService
from omni_grpc.transport.a2a.handler import HubRequestHandler

CARD_PATH = AGENT_CARD_WELL_KNOWN_PATH
SERVICE_NAME = a2a_pb2.DESCRIPTOR.services_by_name["A2AService"].full_name


@dataclass
class A2aConfig:
    name: str = "omni-grpc"
    # None: a sentence naming the engine.
    description: str | None = None
    # The HTTP port's public base URL (behind a proxy); None: the bound address.
    url: str | None = None
    # The gRPC port's public address (host:port); None: the bound address.
    grpc_url: str | None = None


class A2aBinding:
    def __init__(
        self,
        hub: Runtime,
        config: A2aConfig,
        *,
        engine_name: str,
        skills: list[Skill],
        token: bool,
    ) -> None:
        self.config = config
        self.card_path = CARD_PATH
        # Its routes refuse a body that is not JSON themselves (media_problem).
        self.media_prefix = A2A_PREFIX + "/"
        self._http_url: Callable[[], str | None] = lambda: None
        self._grpc_url: Callable[[], str | None] = lambda: None
        self.facts = CardFacts(
            name=config.name,
            description=config.description
            or f"An OmniMessage agent (engine {engine_name}) served by omni-grpc.",
            skills=skills,
            token=token,
            http_url=lambda: config.url or self._http_url(),
            grpc_url=lambda: config.grpc_url or self._grpc_url(),
        )
        self.handler = HubRequestHandler(hub, agent_card(self.facts))
        quiet_client_mistakes()

    def locate(
        self,
        *,
        http: Callable[[], str | None] | None = None,
        grpc_address: Callable[[], str | None] | None = None,
    ) -> None:
        """Where the servers are bound, asked each time the card is built."""
        if http is not None:
            self._http_url = http
        if grpc_address is not None:
            self._grpc_url = grpc_address

    def card(self) -> a2a_pb2.AgentCard:
        return agent_card(self.facts)

    def routes(self) -> list[BaseRoute]:
        # The SDK also mounts every REST route under "/{tenant}" at the root,
        # which would shadow other paths of this port; this server has no tenants.
        rest = create_rest_routes(self.handler, enable_v0_3_compat=True, path_prefix=REST_SUFFIX)
        jsonrpc = JsonRpcEndpoint(
            JsonRpcDispatcher(request_handler=self.handler, enable_v0_3_compat=True)
        )
        return [
            Route(CARD_PATH, CardEndpoint(self.card), methods=["GET"]),
            Mount(
                A2A_PREFIX,
                routes=[
                    # With and without the trailing slash: a client that joins
                    # "/" to the card's URL (the TCK's does) posts to the latter,
                    # and a redirect would lose the POST body on many clients.
                    Route(JSONRPC_SUFFIX, jsonrpc, methods=["POST"]),
                    Route(JSONRPC_SUFFIX + "/", jsonrpc, methods=["POST"]),
                    *(_checked(r) for r in rest if not isinstance(r, Mount)),
                ],
            ),
        ]

    def add_to_grpc_server(self, server: grpc.aio.Server) -> str:
        a2a_pb2_grpc.add_A2AServiceServicer_to_server(  # type: ignore[no-untyped-call]
            A2aGrpcService(self.handler), server
        )
        return SERVICE_NAME


def _checked(route: BaseRoute) -> BaseRoute:
    """The SDK's REST route with the spec's error statuses, and GET /tasks with
    its ``status`` filter checked first."""
    if not isinstance(route, Route):
        return route
    endpoint = spec_statuses(route.endpoint)
    if route.path == REST_SUFFIX + "/tasks":
        endpoint = rest_list_tasks(endpoint)
    return Route(route.path, endpoint, methods=sorted(route.methods or ()))
