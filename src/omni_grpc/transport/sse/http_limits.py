"""The limits an HTTP listener keeps (``HttpLimits``) and the short answers
it closes a connection with, shared by the HTTP/1.1 protocol
(``connections``) and the HTTP/2 one (``http2``): one place, so neither
imports the other (tests/test_layers.py forbids the cycle)."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_HEADER_TIMEOUT = 20.0
DEFAULT_BODY_TIMEOUT = 60.0
# Whole seconds, as uvicorn takes it: past Chromium's 300 s for a used socket.
DEFAULT_IDLE_TIMEOUT = 310
DEFAULT_MAX_CONNECTIONS = 1000


@dataclass(frozen=True)
class HttpLimits:
    header_timeout: float = DEFAULT_HEADER_TIMEOUT
    body_timeout: float = DEFAULT_BODY_TIMEOUT
    idle_timeout: int = DEFAULT_IDLE_TIMEOUT
    max_connections: int = DEFAULT_MAX_CONNECTIONS

    @property
    def accept_batch(self) -> int:
        """The listen backlog, which is also how many connections asyncio
        accepts in one go before any of them is counted: each holds a
        descriptor until the cap closes it, so it is kept small."""
        return max(8, min(128, self.max_connections // 8))

    @property
    def descriptors(self) -> int:
        """The most descriptors the listener's connections hold at once."""
        return self.max_connections + self.accept_batch


def answer_body(code: str, message: str) -> bytes:
    """The JSON body of a refusal the connection layer writes itself."""
    return f'{{"error":{{"code":"{code}","message":"{message}"}}}}'.encode()


def _answer(status: int, reason: str, code: str, message: str) -> bytes:
    body = answer_body(code, message)
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


TOO_MANY = _answer(
    503, "Service Unavailable", "too_many_connections", "this listener holds its maximum"
)
HEADER_TIMEOUT = _answer(
    408, "Request Timeout", "request_timeout", "the request headers did not arrive in time"
)
BODY_TIMEOUT_BODY = answer_body("request_timeout", "the request body stopped arriving")
BODY_TIMEOUT = _answer(
    408, "Request Timeout", "request_timeout", "the request body stopped arriving"
)
