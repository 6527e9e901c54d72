"""The Agent Card: who this agent is and where each A2A binding is served.

Built when it is asked for, since the ports are known only once the servers
are bound (``0`` picks one); behind a proxy the operator gives the public URLs
(``serve --a2a-url`` / ``--a2a-grpc-url``), which the card then names instead.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from a2a.types import a2a_pb2 as a2a
from a2a.utils.constants import PROTOCOL_VERSION_0_3, PROTOCOL_VERSION_CURRENT, TransportProtocol

import omni_grpc
from omni_grpc.transport.a2a import extension

# Everything but the card is under one prefix (one line in the startup banner).
A2A_PREFIX = "/a2a"
JSONRPC_SUFFIX = "/jsonrpc"
REST_SUFFIX = "/rest"
JSONRPC_PATH = A2A_PREFIX + JSONRPC_SUFFIX
REST_PATH = A2A_PREFIX + REST_SUFFIX
BEARER = "bearer"


@dataclass(frozen=True)
class Skill:
    """One thing the agent can do (the engine's tools, or plain conversation)."""

    id: str
    name: str
    description: str


CHAT = Skill("chat", "Conversation", "Answers a prompt, calling its tools as it needs them.")


@dataclass
class CardFacts:
    name: str
    description: str
    skills: Sequence[Skill]
    # Whether the bindings need the bearer token.
    token: bool
    # Where each binding is (None: not served).
    http_url: Callable[[], str | None]
    grpc_url: Callable[[], str | None]


def agent_card(facts: CardFacts) -> a2a.AgentCard:
    card = a2a.AgentCard(
        name=facts.name,
        description=facts.description,
        version=omni_grpc.__version__,
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain", "application/json"],
        capabilities=a2a.AgentCapabilities(
            streaming=True, push_notifications=False, extensions=[extension.card_entry()]
        ),
        skills=[
            a2a.AgentSkill(id=s.id, name=s.name, description=s.description, tags=["omni-grpc"])
            for s in facts.skills
        ],
    )
    http_url = facts.http_url()
    if http_url is not None:
        base = http_url.rstrip("/")
        card.supported_interfaces.add(
            url=base + JSONRPC_PATH,
            protocol_binding=TransportProtocol.JSONRPC.value,
            protocol_version=PROTOCOL_VERSION_CURRENT,
        )
        card.supported_interfaces.add(
            url=base + REST_PATH,
            protocol_binding=TransportProtocol.HTTP_JSON.value,
            protocol_version=PROTOCOL_VERSION_CURRENT,
        )
    grpc_url = facts.grpc_url()
    if grpc_url is not None:
        card.supported_interfaces.add(
            url=grpc_url,
            protocol_binding=TransportProtocol.GRPC.value,
            protocol_version=PROTOCOL_VERSION_CURRENT,
        )
    if http_url is not None:
        # The same HTTP endpoints answer A2A 0.3 too (the SDK's compatibility
        # layer). Listed after the 1.0 ones, so a 1.0 client picks those; the
        # SDK's card serializer turns the first 0.3 entry into the 0.3 card's
        # own fields (url, preferredTransport, additionalInterfaces).
        for path, binding in (
            (JSONRPC_PATH, TransportProtocol.JSONRPC),
            (REST_PATH, TransportProtocol.HTTP_JSON),
        ):
            card.supported_interfaces.add(
                url=http_url.rstrip("/") + path,
                protocol_binding=binding.value,
                protocol_version=PROTOCOL_VERSION_0_3,
            )
    if facts.token:
        card.security_schemes[BEARER].http_auth_security_scheme.CopyFrom(
            a2a.HTTPAuthSecurityScheme(
                scheme="Bearer",
                description="The token the server was started with (serve --auth-token).",
            )
        )
        card.security_requirements.add().schemes[BEARER].CopyFrom(a2a.StringList())
    return card
