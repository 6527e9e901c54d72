"""AgentService over gRPC: a thin view over the session hub."""

from omni_grpc.transport.grpc.server import GrpcConfig, GrpcTransport
from omni_grpc.transport.grpc.service import SESSION_HEADER, AgentService

__all__ = ["SESSION_HEADER", "AgentService", "GrpcConfig", "GrpcTransport"]
