"""omni-grpc: the OmniMessage agent protocol over gRPC, protobuf and SSE."""

__version__ = "0.1.0"
# The revision of the omni.v1 schema (CHANGELOG.md), stated by every package.
SCHEMA_VERSION = "0.2.0"
