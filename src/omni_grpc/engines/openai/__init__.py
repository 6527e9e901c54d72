"""The ``openai`` engine: a real agent loop over an OpenAI-compatible endpoint."""

from __future__ import annotations

from omni_grpc.engines.openai.config import OpenAIConfig
from omni_grpc.engines.openai.engine import OpenAIEngine


def create(**options: str) -> OpenAIEngine:
    """The factory behind ``--engine openai --engine-opt key=value ...``."""
    return OpenAIEngine(OpenAIConfig.from_options(options))


__all__ = ["OpenAIConfig", "OpenAIEngine", "create"]
