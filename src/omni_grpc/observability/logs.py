"""Structured logs: one JSON object per line, with the run's context.

``--log-format json`` installs ``JsonFormatter`` on the root logger (and on
uvicorn's loggers). Each record carries ``time``, ``level``, ``logger`` and
``message``, plus ``session_id``, ``run_id`` and ``trace_id`` when it was
logged on behalf of a run (context variables the hub sets in the run's task,
so they follow it into the engine's tasks too).

Secrets stay out: the server's own code never logs prompts or message
content, and every formatted line, in either format, passes through a
redaction that removes bearer credentials, ``access_token`` query parameters
(which uvicorn's access log would otherwise print) and any secret the server
was configured with (the auth token, engine keys), in every spelling a URL
gives it (percent-encoded, in any path segment or parameter).
"""

from __future__ import annotations

import logging
import re
import secrets
from collections.abc import Iterable
from contextvars import ContextVar, Token
from datetime import UTC, datetime
from typing import Any

import orjson
from opentelemetry import trace

from omni_grpc.observability.tracing import reset

_session: ContextVar[str | None] = ContextVar("omni_log_session", default=None)
_run: ContextVar[str | None] = ContextVar("omni_log_run", default=None)

REDACTED = "[redacted]"
_PATTERNS = (
    # Authorization: Bearer <token>, in headers, errors or reprs.
    re.compile(r"(?i)(bearer\s+)[^\s'\",;]+"),
    # ?access_token=... (RFC 6750 query form) and key=... style options.
    re.compile(r"(?i)((?:access_token|api_key|token)=)[^&\s'\",;]+"),
)
LOG_FORMATS = ("text", "json")
TEXT_FORMAT = "%(levelname)s %(name)s: %(message)s"


def new_run_id() -> str:
    return f"run_{secrets.token_hex(8)}"


def enter_run(session_id: str, run_id: str) -> tuple[Token[str | None], Token[str | None]]:
    return _session.set(session_id), _run.set(run_id)


def leave_run(tokens: tuple[Token[str | None], Token[str | None]]) -> None:
    for token in tokens:
        reset(token)


def current_run() -> tuple[str | None, str | None]:
    """(session id, run id) of the run this task works for, if any."""
    return _session.get(), _run.get()


def _any_spelling(secret: str) -> re.Pattern[str]:
    """Matches ``secret`` however a URL spells it: each character as itself or
    percent-encoded (either hex case, encoded again any number of times), a
    space also as ``+``. An access log prints the path and query as the
    client wrote them, so a token in a path segment or in any parameter comes
    out in one of these forms."""
    parts = []
    for char in secret:
        encoded = "".join(f"%(?:25)*(?i:{byte:02x})" for byte in char.encode("utf-8"))
        spellings = [re.escape(char), encoded, *([r"\+"] if char == " " else [])]
        parts.append(f"(?:{'|'.join(spellings)})")
    return re.compile("".join(parts))


class Redactor:
    """Removes credentials from formatted log text."""

    def __init__(self, secrets: Iterable[str | None] = ()) -> None:
        # Short values would blank out ordinary words; tokens are long.
        values = sorted({s for s in secrets if s and len(s) >= 6}, key=len, reverse=True)
        self._secrets = [_any_spelling(value) for value in values]

    def __call__(self, text: str) -> str:
        for pattern in _PATTERNS:
            text = pattern.sub(lambda m: m.group(1) + REDACTED, text)
        for secret in self._secrets:
            text = secret.sub(REDACTED, text)
        return text


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, message, and the run context."""

    def __init__(self, redact: Redactor | None = None) -> None:
        super().__init__()
        self._redact = redact or Redactor()

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": self._redact(record.getMessage()),
        }
        session_id, run_id = current_run()
        if session_id is not None:
            entry["session_id"] = session_id
        if run_id is not None:
            entry["run_id"] = run_id
        span = trace.get_current_span().get_span_context()
        if span.is_valid:
            entry["trace_id"] = format(span.trace_id, "032x")
            entry["span_id"] = format(span.span_id, "016x")
        if record.exc_info:
            entry["exception"] = self._redact(self.formatException(record.exc_info))
        elif record.exc_text:
            entry["exception"] = self._redact(record.exc_text)
        return orjson.dumps(entry).decode()


class RedactingFormatter(logging.Formatter):
    """The plain text format, with the same redaction."""

    def __init__(self, fmt: str = TEXT_FORMAT, redact: Redactor | None = None) -> None:
        super().__init__(fmt)
        self._redact = redact or Redactor()

    def format(self, record: logging.LogRecord) -> str:
        return self._redact(super().format(record))


# uvicorn configures these itself unless told not to; they get our handler instead.
UVICORN_LOGGERS = ("uvicorn", "uvicorn.error", "uvicorn.access")


def configure(level: str, fmt: str = "text", secrets: Iterable[str | None] = ()) -> None:
    """Sends every log record to stderr in ``fmt`` (text or json), redacted."""
    if fmt not in LOG_FORMATS:
        raise ValueError(f"log format {fmt!r}: expected text or json")
    redact = Redactor(secrets)
    handler = logging.StreamHandler()
    formatter: logging.Formatter = (
        JsonFormatter(redact) if fmt == "json" else RedactingFormatter(redact=redact)
    )
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    for name in UVICORN_LOGGERS:
        logger = logging.getLogger(name)
        logger.handlers.clear()
        logger.propagate = True
