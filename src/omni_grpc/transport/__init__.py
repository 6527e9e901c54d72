"""Transports: thin views over the session hub (gRPC in ``grpc``, HTTP/SSE in ``sse``)."""
