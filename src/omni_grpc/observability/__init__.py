"""Metrics, traces and structured logs: what an operator sees of the server.

* ``metrics``: the Prometheus instruments, one registry per server;
* ``tracing``: OpenTelemetry spans and W3C context propagation (API only,
  the SDK comes with the ``[otel]`` extra);
* ``logs``: the JSON log format, the run context of each record, redaction;
* ``observer``: what the hub reports, and ``grpc_server`` / ``http``: the
  transports' interceptor and middleware;
* ``telemetry``: the bundle a server builds once and hands to each part.
"""
