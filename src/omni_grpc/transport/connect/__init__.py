"""AgentService over Connect and gRPC-Web on the HTTP port (see ``app``)."""

from omni_grpc.transport.connect.app import (
    METHODS,
    PREFIX,
    ConnectApp,
    ConnectConfig,
    ConnectTransport,
)

__all__ = ["METHODS", "PREFIX", "ConnectApp", "ConnectConfig", "ConnectTransport"]
