"""Shared by the A2A tests: a real server with both ports, and the official
Python SDK's client (``a2a-sdk``) bound to one of its bindings."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import grpc
import httpx
from a2a.client import Client, ClientCallContext, ClientConfig, create_client
from a2a.types import a2a_pb2 as a2a
from google.protobuf import json_format

from omni_grpc.runtime.backend import Backend
from omni_grpc.server import OmniServer, ServerConfig, build_server
from omni_grpc.transport.a2a import extension
from omni_grpc.transport.grpc import GrpcConfig
from omni_grpc.transport.sse.transport import SseConfig, SseTransport

BINDINGS = ["JSONRPC", "GRPC", "HTTP+JSON"]
LOSSLESS = ClientCallContext(service_parameters={"A2A-Extensions": extension.URI})


async def start_server(
    data_dir: Path, *, backend: Backend | None = None, **overrides: Any
) -> OmniServer:
    """A server with gRPC and HTTP on free ports (``backend``: a replica's)."""
    token = overrides.pop("auth_token", None)
    config = ServerConfig(
        data_dir=data_dir,
        grpc=GrpcConfig(host="127.0.0.1", port=0, auth_token=token),
        http=SseConfig(host="127.0.0.1", port=0, auth_token=token),
        shutdown_grace=1.0,
        **overrides,
    )
    server = build_server(config, backend=backend)
    await server.start()
    return server


def http_url(server: OmniServer) -> str:
    return next(t for t in server.transports if isinstance(t, SseTransport)).url


@asynccontextmanager
async def sdk_client(
    server: OmniServer, binding: str, token: str | None = None
) -> AsyncIterator[Client]:
    """The SDK's client, from the card the server serves, on ``binding``."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    channels: list[grpc.aio.Channel] = []

    def channel(url: str) -> grpc.aio.Channel:
        interceptors = [_UnaryToken(token), _StreamToken(token)] if token else []
        made = grpc.aio.insecure_channel(url, interceptors=interceptors)
        channels.append(made)
        return made

    async with httpx.AsyncClient(headers=headers, timeout=30) as http:
        config = ClientConfig(
            httpx_client=http,
            grpc_channel_factory=channel,
            supported_protocol_bindings=[binding],
        )
        client = await create_client(http_url(server), config)
        try:
            yield client
        finally:
            await client.close()
            for made in channels:
                await made.close()


class _Token:
    def __init__(self, token: str) -> None:
        self.token = token

    async def _add(
        self, continuation: Callable[..., Awaitable[Any]], details: Any, request: Any
    ) -> Any:
        metadata = [*(details.metadata or ()), ("authorization", f"Bearer {self.token}")]
        return await continuation(details._replace(metadata=metadata), request)


# grpc.aio files an interceptor under its first matching kind only: one class per kind.
class _UnaryToken(_Token, grpc.aio.UnaryUnaryClientInterceptor):  # type: ignore[misc]
    intercept_unary_unary = _Token._add


class _StreamToken(_Token, grpc.aio.UnaryStreamClientInterceptor):  # type: ignore[misc]
    intercept_unary_stream = _Token._add


def user_message(text: str, **fields: Any) -> a2a.SendMessageRequest:
    message = a2a.Message(
        message_id=fields.pop("message_id", "m-" + text[:8]),
        role=a2a.ROLE_USER,
        parts=[a2a.Part(text=text)],
        **fields,
    )
    return a2a.SendMessageRequest(message=message)


def approval(task: str, decision: str, tool_call_id: str | None = None) -> a2a.SendMessageRequest:
    data: dict[str, str] = {"decision": decision}
    if tool_call_id is not None:
        data["toolCallId"] = tool_call_id
    part = a2a.Part()
    json_format.ParseDict(data, part.data)
    message = a2a.Message(
        message_id=f"answer-{decision}", role=a2a.ROLE_USER, task_id=task, parts=[part]
    )
    return a2a.SendMessageRequest(message=message)


def state_of(event: a2a.StreamResponse) -> int | None:
    if event.HasField("task"):
        return event.task.status.state
    if event.HasField("status_update"):
        return event.status_update.status.state
    return None


def task_id_of(event: a2a.StreamResponse) -> str:
    if event.HasField("task"):
        return event.task.id
    if event.HasField("status_update"):
        return event.status_update.task_id
    return event.artifact_update.task_id


def artifact_texts(events: list[a2a.StreamResponse], name: str) -> list[str]:
    """The streamed artifacts called ``name``, each put together from its chunks
    the way a client does (``append`` adds to it; ``lastChunk`` closes it)."""
    built: dict[str, str] = {}
    closed: set[str] = set()
    for event in events:
        if not event.HasField("artifact_update"):
            continue
        update = event.artifact_update
        artifact = update.artifact
        if artifact.name != name:
            continue
        assert artifact.artifact_id not in closed, "a chunk after lastChunk"
        text = "".join(p.text for p in artifact.parts)
        if update.append:
            assert artifact.artifact_id in built, "append to an artifact never started"
            built[artifact.artifact_id] += text
        else:
            built[artifact.artifact_id] = text
        if update.last_chunk:
            closed.add(artifact.artifact_id)
    assert closed == set(built), "an artifact without its lastChunk"
    return list(built.values())


def lossless_messages(events: list[a2a.StreamResponse]) -> list[tuple[str, str]]:
    """(eventId, json) of each OmniMessage the extension carried, in order."""
    out = []
    for event in events:
        if event.HasField("task"):  # a stream's snapshot: what happened before it
            for artifact in event.task.artifacts:
                if artifact.artifact_id == extension.ARTIFACT_ID:
                    for part in artifact.parts:
                        value = json_format.MessageToDict(part.data)
                        out.append((value["eventId"], value["json"]))
        if (
            event.HasField("artifact_update")
            and event.artifact_update.artifact.artifact_id == extension.ARTIFACT_ID
        ):
            for part in event.artifact_update.artifact.parts:
                value = json_format.MessageToDict(part.data)
                out.append((value["eventId"], value["json"]))
    return out
