"""Structured logs: the JSON line format, the run context, and what never gets logged."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import secrets
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest

from omni_grpc.engines.base import JsonObject, RunOptions
from omni_grpc.observability.logs import JsonFormatter, Redactor
from omni_grpc.observability.observer import HubTelemetry
from omni_grpc.protocol import builders as b
from omni_grpc.runtime.bodies import is_task_end
from omni_grpc.runtime.hub import Hub, RunRequest
from omni_grpc_proto.omni.v1 import agent_service_pb2 as pb
from omni_grpc_proto.omni.v1 import agent_service_pb2_grpc, omni_pb2

engine_log = logging.getLogger("tests.chatty_engine")


class ChattyEngine:
    """Logs from inside its run, and from a task the run starts."""

    name = "chatty"

    async def run(self, input: list[JsonObject], options: RunOptions) -> AsyncIterator[JsonObject]:
        engine_log.warning("starting a run")
        await asyncio.create_task(_log_in_a_task())
        yield b.request_begin()
        yield b.assistant_text("done")
        yield b.request_end("completed")


async def _log_in_a_task() -> None:
    engine_log.warning("inside a helper task")


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    engine_log.addHandler(handler)
    engine_log.propagate = False
    try:
        yield stream
    finally:
        engine_log.removeHandler(handler)
        engine_log.propagate = True


def text_input(text: str) -> list[omni_pb2.OmniMessage]:
    return [omni_pb2.OmniMessage(text=omni_pb2.Text(role=omni_pb2.ROLE_USER, text=text))]


async def test_records_logged_for_a_run_carry_its_session_and_run(
    captured: io.StringIO, tmp_path: Path
) -> None:
    hub = Hub(ChattyEngine(), tmp_path, observer=HubTelemetry(None, None, "chatty"))
    engine_log.warning("outside any run")
    session_id, sub = await hub.run(RunRequest(input=text_input("hi")))
    async for event in sub:
        if is_task_end(event):
            break
    await hub.wait_idle(session_id)
    await hub.shutdown()
    lines = [json.loads(line) for line in captured.getvalue().splitlines()]
    assert [line["message"] for line in lines] == [
        "outside any run",
        "starting a run",
        "inside a helper task",
    ]
    for line in lines:
        assert {"time", "level", "logger", "message"} <= set(line)
        assert line["level"] == "warning" and line["logger"] == "tests.chatty_engine"
        assert line["time"].endswith("+00:00")
    assert "session_id" not in lines[0] and "run_id" not in lines[0]
    assert lines[1]["session_id"] == lines[2]["session_id"] == session_id
    assert lines[1]["run_id"] == lines[2]["run_id"]
    assert lines[1]["run_id"].startswith("run_")


def test_credentials_are_redacted_in_messages_and_tracebacks() -> None:
    token = secrets.token_hex(16)
    formatter = JsonFormatter(Redactor([token]))
    try:
        raise ValueError(f"refused {token}")
    except ValueError:
        record = logging.LogRecord(
            "x", logging.ERROR, __file__, 1,
            "GET /s?access_token=%s&x=1 with Authorization: Bearer abc.def and %s",
            ("tok-in-query", token), exc_info=sys.exc_info(),
        )  # fmt: skip
    line = json.loads(formatter.format(record))
    assert "tok-in-query" not in line["message"] and "abc.def" not in line["message"]
    assert token not in line["message"] and token not in line["exception"]
    assert "access_token=[redacted]&x=1" in line["message"]
    assert "Bearer [redacted]" in line["message"]


def test_serve_json_logs_hold_no_token_and_no_prompt(
    serve_process: Callable[..., Any],
) -> None:
    token = secrets.token_hex(16)
    prompt = f"the secret prompt {secrets.token_hex(8)}"
    served = serve_process(
        "--log-format", "json", "--log-level", "info", "--auth-token", token
    )  # fmt: skip

    async def drive() -> None:
        async with grpc.aio.insecure_channel(served.grpc_address) as channel:
            stub = agent_service_pb2_grpc.AgentServiceStub(channel)
            async for _ in stub.Run(
                pb.RunRequest(prompt=prompt), metadata=(("authorization", f"Bearer {token}"),)
            ):
                pass
            with pytest.raises(grpc.aio.AioRpcError):
                await stub.ListSessions(pb.ListSessionsRequest())
        async with httpx.AsyncClient(base_url=f"http://{served.http_address}") as http:
            # The query form of the token, as EventSource clients send it.
            assert (await http.get(f"/api/sessions?access_token={token}")).status_code == 200
            assert (await http.get("/api/sessions")).status_code == 401

    asyncio.run(drive())
    served.process.terminate()
    _, stderr = served.process.communicate(timeout=20)
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert lines, "info level logs the HTTP requests at least"
    for line in lines:
        entry = json.loads(line)  # every line is one JSON object
        assert {"time", "level", "logger", "message"} <= set(entry), line
    assert token not in stderr
    assert prompt not in stderr
    assert any("access_token=[redacted]" in json.loads(line)["message"] for line in lines)
