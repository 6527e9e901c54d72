"""omni-grpc: the OmniMessage agent protocol over gRPC, protobuf and SSE."""

__version__ = "0.1.0"
