"""GetHistory pages (page_size, page_token) against a real server: each page
is the window the full history's slice gives, the pages walk back to the
session's start, and bad tokens are refused naming the field."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from conftest import ServerFactory

from omni_grpc.client import AgentClient, AgentError
from omni_grpc.convert import serialize_message
from omni_grpc.trace.paths import trace_path_for
from omni_grpc.trace.window import format_cursor, positioned, window
from omni_grpc_proto.omni.v1 import agent_service_pb2 as pb
from omni_grpc_proto.omni.v1 import agent_service_pb2_grpc
from tests.test_trace_index import DAY, SID, demo_session

WAIT = 30.0


def seed(data: Path, tasks: int) -> list[tuple[int, list[bytes]]]:
    """A two-shard session written without an index (the server builds it)."""
    shards = demo_session(tasks)
    out = []
    for number, messages in shards:
        path = trace_path_for(data / "traces", SID, number, day=DAY)
        path.parent.mkdir(parents=True, exist_ok=True)
        lines = [serialize_message(m) for m in messages]
        path.write_bytes(b"".join(line + b"\n" for line in lines))
        out.append((number, lines))
    return out


async def test_pages_are_the_full_historys_windows(
    server_factory: ServerFactory, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    seed(data, 9)
    server = await server_factory(data_dir=data)
    assert server.grpc is not None
    async with AgentClient(server.grpc.address) as client:
        # One more task through the server: the writer extends the index.
        async for _ in client.run("one more", session_id=SID):
            pass
        whole = [m async for m in client.history(SID)]
        records = positioned(
            [(1, whole[: 1 + 9 * 6]), (2, whole[1 + 9 * 6 :])]  # demo_session's shard sizes
        )
        for size in (1, 2, 4, 50):
            pages, token, tokens = [], "", []
            while True:
                messages, token = await client.history_page(SID, size, token)
                pages.append(messages)
                tokens.append(token)
                if not token:
                    break
            assert [m for page in reversed(pages) for m in page] == whole
            before = None
            for page, token in zip(pages, tokens, strict=True):
                expected = window(records, size, before)
                assert page == [m for _, m in expected.messages]
                assert token == (format_cursor(expected.before) if expected.before else "")
                before = expected.before
        assert len(pages) == 1  # 50 tasks: the whole history, and no token
        tail = [m async for m in client.history(SID, page_size=1)]
        # The seeded session ends on a prompt nothing answered: the new one
        # joins its send, so the newest task holds both.
        texts = [m.text.text for m in tail if m.HasField("text")]
        assert texts[0] == "after the rotation" and "one more" in texts


async def test_bad_page_requests_name_the_field(
    server_factory: ServerFactory, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    seed(data, 2)
    server = await server_factory(data_dir=data)
    assert server.grpc is not None
    async with AgentClient(server.grpc.address) as client:
        for token in ("nope", "1:", "-1:2", "1:2:3"):
            with pytest.raises(AgentError) as bad:
                await client.history_page(SID, 3, token)
            assert bad.value.code == grpc.StatusCode.INVALID_ARGUMENT
            assert "page_token" in str(bad.value)
        # A token without a page size would silently be ignored: refused.
        async with grpc.aio.insecure_channel(server.grpc.address) as channel:
            stub = agent_service_pb2_grpc.AgentServiceStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as alone:
                async for _ in stub.GetHistory(
                    pb.GetHistoryRequest(session_id=SID, page_token="1:3"), timeout=WAIT
                ):
                    pass
            assert alone.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "page_token" in (alone.value.details() or "")
        # A token into a shard the session does not have: an empty page.
        assert await client.history_page(SID, 3, "7:0") == ([], "")
        with pytest.raises(AgentError) as missing:
            await client.history_page("session-nope", 3)
        assert missing.value.code == grpc.StatusCode.NOT_FOUND
