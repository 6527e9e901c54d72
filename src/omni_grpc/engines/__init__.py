"""Engines: what produces OmniMessages behind the service (see ``base``)."""

from omni_grpc.engines.base import (
    AbortSignal,
    Decision,
    Engine,
    EngineMessage,
    JsonObject,
    RunOptions,
    WireMessage,
)

__all__ = [
    "AbortSignal",
    "Decision",
    "Engine",
    "EngineMessage",
    "JsonObject",
    "RunOptions",
    "WireMessage",
]
