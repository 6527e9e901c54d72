"""Omni SSE dialect frames carry ids: a dropped ``/v1/runs`` stream resumes
with ``Last-Event-ID``, without loss or duplicates; ask mode announces each
pending approval with the route that answers it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from httpx_sse import aconnect_sse

from omni_grpc.engines.demo import DemoEngine
from omni_grpc.runtime import bodies
from omni_grpc.runtime.hub import Hub
from omni_grpc.runtime.memory_log import MemoryEventLog
from omni_grpc.transport.sse.app import create_app
from omni_grpc.transport.sse.server import HttpServer

SEED_EVENTS = {"thought", "tool_call", "tool_result", "message", "error", "done"}


@dataclass(frozen=True)
class Frame:
    id: str
    event: str
    data: dict[str, Any]


@asynccontextmanager
async def served(
    tmp_path: Path, *, pacing: float = 0.0, max_count: int = 10_000, **hub_options: Any
) -> AsyncIterator[tuple[Hub, httpx.AsyncClient]]:
    def log_factory(_sid: str) -> MemoryEventLog:
        return MemoryEventLog(bodies.resync_required_body(), max_count=max_count)

    hub = Hub(DemoEngine(pacing=pacing), tmp_path / "data", log_factory=log_factory,
              **hub_options)  # fmt: skip
    server = HttpServer(create_app(hub), port=0)
    await server.start()
    try:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
            yield hub, http
    finally:
        await hub.shutdown()
        await server.stop()


async def frames(
    http: httpx.AsyncClient,
    method: str,
    *,
    body: dict[str, Any] | None = None,
    last: str | None = None,
    limit: int | None = None,
    stop_at: str | None = None,
) -> tuple[str, list[Frame]]:
    """The session id and the frames of one /v1/runs stream (up to ``limit``
    of them, or the first ``stop_at`` event, after which the connection is
    dropped)."""
    headers = {"last-event-id": last} if last else {}
    got: list[Frame] = []
    async with aconnect_sse(http, method, "/v1/runs", json=body, headers=headers) as source:
        assert source.response.status_code == 200, await source.response.aread()
        session_id = source.response.headers["omni-session-id"]
        async for sse in source.aiter_sse():
            if not sse.data:
                continue  # the heartbeat comment
            got.append(Frame(sse.id, sse.event, json.loads(sse.data)))
            if sse.event in ("done", stop_at) or (limit is not None and len(got) >= limit):
                break
    return session_id, got


def check_run(got: list[Frame]) -> None:
    """Ids unique and strictly in order, one done and last, seed events only
    (plus the extension)."""
    ids = [f.id for f in got]
    assert all(ids) and len(set(ids)) == len(ids)
    positions = [tuple(int(n) for n in i.rsplit("/", 1)[1].split(".")) for i in ids]
    assert positions == sorted(positions)
    assert [f.event for f in got].count("done") == 1 and got[-1].event == "done"
    assert {f.event for f in got} <= SEED_EVENTS | {"approval_request"}


async def test_a_resume_from_any_frame_sends_exactly_the_rest(tmp_path: Path) -> None:
    async with served(tmp_path) as (_hub, http):
        session_id, full = await frames(http, "POST", body={"prompt": "tell me everything"})
        check_run(full)
        assert all(f.id.startswith(session_id + "/") for f in full)
        for cut in range(len(full) - 1):
            # A POST reconnect repeats its body; the id makes it a resume, not a new run.
            _, rest = await frames(http, "POST", body={"prompt": "tell me everything"},
                                   last=full[cut].id)  # fmt: skip
            assert rest == full[cut + 1 :], cut
            # EventSource can only GET: the same resume, the id in the query.
            async with aconnect_sse(http, "GET", f"/v1/runs?lastEventId={full[cut].id}") as es:
                again = [
                    Frame(s.id, s.event, json.loads(s.data)) async for s in es.aiter_sse() if s.data
                ]
            assert again == full[cut + 1 :], cut
        # After done there is nothing left: 204, which tells an EventSource to
        # stop reconnecting (a 200 with no frames would have it reconnect forever).
        done = full[-1].id
        for method, url, headers, body in [
            ("POST", "/v1/runs", {"last-event-id": done}, {"prompt": "tell me everything"}),
            ("GET", f"/v1/runs?lastEventId={done}", {}, None),
            ("GET", "/v1/runs", {"last-event-id": done}, None),
        ]:
            answer = await http.request(method, url, headers=headers, json=body)
            assert (answer.status_code, answer.content) == (204, b""), (method, url)
            assert answer.headers["omni-session-id"] == session_id
        # Still one session with one run: no reconnect started another.
        sessions = (await http.get("/api/sessions")).json()["sessions"]
        assert [s["messageCount"] for s in sessions if s["sessionId"] == session_id] != []
        assert len(sessions) == 1


async def test_a_dropped_detached_run_resumes_live_without_loss_or_duplicates(
    tmp_path: Path,
) -> None:
    async with served(tmp_path, pacing=0.02) as (hub, http):
        body = {"prompt": "one two three four five six seven eight", "detach": True}
        for cut in (1, 3, 6):
            session_id, before = await frames(http, "POST", body=body, limit=cut)
            assert len(before) == cut and before[-1].event != "done"
            _, after = await frames(http, "POST", body=body, last=before[-1].id)
            run = before + after
            check_run(run)
            await hub.wait_idle(session_id)
            # The deltas add up to the reply, exactly once.
            history = [m async for m in await hub.history(session_id)]
            replies = [m.text.text for m in history if m.WhichOneof("payload") == "text"
                       and m.text.role == 2]  # fmt: skip
            said = "".join(f.data["delta"] for f in run if f.event == "message")
            assert said == "\n\n".join(replies)
            assert run[-1].data["status"] == "completed"
            # The same frames as a replay of the whole run from its first frame.
            _, replay = await frames(http, "GET", last=run[0].id)
            assert replay == run[1:]


async def test_a_dropped_attached_run_is_aborted_and_the_resume_says_so(tmp_path: Path) -> None:
    async with served(tmp_path, pacing=0.05) as (hub, http):
        session_id, before = await frames(http, "POST", body={"prompt": "a b c d e f"}, limit=2)
        await asyncio.wait_for(hub.wait_idle(session_id), 10)
        _, after = await frames(http, "GET", last=before[-1].id)
        check_run(before + after)
        assert after[-1].data["status"] == "aborted"


async def test_ask_mode_announces_the_pending_approval_and_its_route(tmp_path: Path) -> None:
    async with served(tmp_path) as (_hub, http):
        body = {"prompt": "list it", "approvalMode": "ask", "detach": True}
        session_id, before = await frames(http, "POST", body=body, stop_at="approval_request")
        ask = [f for f in before if f.event == "approval_request"]
        assert [f.event for f in before][-1] == "approval_request"  # then it waits
        [request] = ask
        call = next(f for f in before if f.event == "tool_call")
        assert request.data == {
            "call_id": call.data["call_id"],
            "tool": call.data["tool"],
            "args": call.data["args"],
            "answer": {
                "method": "POST",
                "path": f"/api/sessions/{session_id}/approvals/{call.data['call_id']}",
                "decisions": ["allow", "deny"],
            },
        }
        # A reconnect while it waits is not asked twice; one from before the
        # request gets it once.
        resumed = asyncio.create_task(frames(http, "GET", last=request.id))
        earlier = asyncio.create_task(frames(http, "GET", last=call.id))
        await asyncio.sleep(0)  # let both connect before the answer
        answer = request.data["answer"]
        r = await http.request(answer["method"], answer["path"], json={"decision": "deny"})
        assert r.status_code == 204, r.text
        _, rest = await asyncio.wait_for(resumed, 30)
        _, from_call = await asyncio.wait_for(earlier, 30)
        assert "approval_request" not in [f.event for f in rest]
        assert [f.event for f in from_call].count("approval_request") == 1
        check_run(before + rest)
        result = next(f for f in rest if f.event == "tool_result")
        assert result.data["result"] == "Tool call denied by user."


@pytest.mark.parametrize(
    ("last", "status", "code"),
    [
        ("not-an-id", 400, "invalid_request"),
        ("session-x/abc-", 400, "invalid_request"),
        ("session-nope/0011aabb-1/4.0", 404, None),
    ],
)
async def test_bad_resume_ids_are_refused(
    tmp_path: Path, last: str, status: int, code: str | None
) -> None:
    async with served(tmp_path) as (_hub, http):
        for method in ("GET", "POST"):
            r = await http.request(method, "/v1/runs", headers={"last-event-id": last},
                                   json={"prompt": "x"})  # fmt: skip
            assert r.status_code == status, r.text
            if code is not None:
                assert r.json()["error"]["code"] == code
        r = await http.get("/v1/runs")
        assert r.status_code == 400 and "Last-Event-ID" in r.json()["error"]["message"]


async def test_a_run_gone_from_the_buffer_cannot_resume(tmp_path: Path) -> None:
    async with served(tmp_path, max_count=8) as (_hub, http):
        session_id, run = await frames(http, "POST", body={"prompt": "a long enough reply"})
        r = await http.get("/v1/runs", headers={"last-event-id": run[0].id})
        assert r.status_code == 409
        assert r.json()["error"]["code"] == "resume_unavailable"
        assert f"/api/sessions/{session_id}/messages" in r.json()["error"]["message"]
