"""A2A (Agent2Agent v1.0) over the hub: the card, JSON-RPC, HTTP+JSON and gRPC."""

from omni_grpc.transport.a2a.binding import CARD_PATH, A2aBinding, A2aConfig
from omni_grpc.transport.a2a.card import CHAT, Skill

__all__ = ["CARD_PATH", "CHAT", "A2aBinding", "A2aConfig", "Skill"]
