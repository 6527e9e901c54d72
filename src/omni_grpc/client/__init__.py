"""The Python client library for AgentService."""

from omni_grpc.client.agent_client import AgentClient, RunStream
from omni_grpc.client.errors import AgentError
from omni_grpc.client.events import StreamEvent

__all__ = ["AgentClient", "AgentError", "RunStream", "StreamEvent"]
