"""Windows of ``GET /messages`` on a session with tool calls, a compaction and steering.

The session's first two tasks are a trace in the reference's shape, written
here with timestamps chosen so every ``prior`` total can be worked out by
hand: task A calls a tool; task B sends a prompt with an image, is steered
mid-run (a ``[user_steering]`` block and its image), calls a tool, and is
compacted, which rotates the trace to a second shard that opens with copies
of the meta and tool list and then the summary. A real hub over that data
directory then runs two more demo-engine tasks (C and D), each with a tool
call, into the second shard. The windows are read over HTTP.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from omni_grpc import protocol as p
from omni_grpc.convert import message_from_dict, serialize_message
from omni_grpc.engines.demo import DemoEngine
from omni_grpc.runtime.hub import Hub
from omni_grpc.trace.paths import trace_path_for
from omni_grpc.trace.window import PriorTotals, positioned, window
from omni_grpc.transport.sse.app import create_app
from omni_grpc.transport.sse.server import HttpServer

SID = "session-2026-08-23-10-00-00-0a1b2c3d"
DAY = datetime(2026, 8, 23)
STEERING = "[user_steering]\nand the dog?\n[/user_steering]"


def at(seconds: float) -> str:
    whole, frac = divmod(round(seconds * 1000), 1000)
    return f"2026-08-23T10:00:{whole:02d}.{frac:03d}Z"


def usage(session: int, request: int, t: float) -> dict[str, Any]:
    counts = lambda n: {"cache_read": 0, "cache_write": n, "output": 0, "total": n}  # noqa: E731
    return p.token_usage(counts(session), counts(request), timestamp=at(t))


def first_shard(workspace: str) -> list[dict[str, Any]]:
    meta = p.session_meta(
        p.session_meta_payload(SID, "omni-grpc", "demo", 32768, "", "", workspace),
        timestamp=at(0),
    )
    tools = p.tool_list_ready([p.tool_definition("ls", "list", None)], timestamp=at(10))
    return [
        meta,
        # Task A: 10.000 to its last request_end at 12.000 (2000 ms).
        p.user_text("list the files", timestamp=at(10)),
        tools,
        p.request_begin(timestamp=at(10.1)),
        p.tool_call("ls", '{"path":"."}', "call_a", timestamp=at(10.5)),
        p.approval_decision("allow", "call_a", timestamp=at(10.6)),
        usage(100, 100, 10.7),
        p.request_end("completed", timestamp=at(10.8)),
        p.tool_call_output("a.txt", "call_a", timestamp=at(11)),
        p.request_begin(timestamp=at(11.1)),
        p.assistant_text("There is a.txt.", timestamp=at(11.5)),
        usage(250, 150, 11.6),
        p.request_end("completed", timestamp=at(12)),
        # Task B (ordinal 13): a prompt and its image, one send.
        p.user_text("look at this", timestamp=at(20)),
        p.image_url("https://example.com/cat.png", timestamp=at(20)),
        p.request_begin(timestamp=at(20.1)),
        p.assistant_text("A cat.", timestamp=at(20.5)),
        p.user_text(STEERING, timestamp=at(20.6)),
        p.image_url("https://example.com/dog.png", timestamp=at(20.6)),
        p.tool_call("ls", '{"path":"dogs"}', "call_b", timestamp=at(20.7)),
        p.approval_decision("allow", "call_b", timestamp=at(20.8)),
        usage(400, 150, 20.9),
        p.request_end("completed", timestamp=at(21)),
        p.tool_call_output("dog.txt", "call_b", timestamp=at(21.5)),
        # The compaction: its records do not extend the task, its usage is
        # not context occupancy.
        p.compaction_begin("context", "summarize", 150, 2, timestamp=at(21.6)),
        p.request_begin(timestamp=at(21.7)),
        p.assistant_text("Summary: a cat, a dog.", timestamp=at(22)),
        usage(500, 100, 22.1),
        p.request_end("completed", timestamp=at(22.2)),
        p.compaction_end("context", "summarize", "completed", timestamp=at(22.3)),
    ]


def second_shard(first: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        first[0],  # the same meta and tool list objects, original timestamps
        first[2],
        p.user_text("[context_summary]\nSummary: a cat, a dog.", timestamp=at(22.4)),
        p.request_begin(timestamp=at(22.5)),
        p.assistant_text("The dog is fine.", timestamp=at(23)),
        usage(600, 120, 23.1),
        # Task B ends here, 4000 ms after it started.
        p.request_end("completed", timestamp=at(24)),
    ]


def write_shard(path: Path, records: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(serialize_message(message_from_dict(r)) + b"\n" for r in records))


@asynccontextmanager
async def session_with_history(
    tmp_path: Path, *, pacing_after: float = 0.0
) -> AsyncIterator[httpx.AsyncClient]:
    data = tmp_path / "data"
    traces = data / "traces"
    first = first_shard(str(data / "workspaces" / SID))
    write_shard(trace_path_for(traces, SID, 1, day=DAY), first)
    write_shard(trace_path_for(traces, SID, 2, day=DAY), second_shard(first))
    engine = DemoEngine()
    hub = Hub(engine, data)
    server = HttpServer(create_app(hub), port=0)
    await server.start()
    try:
        async with httpx.AsyncClient(base_url=server.url, timeout=10) as http:
            for prompt in ("task C", "task D"):
                r = await http.post(f"/api/sessions/{SID}/tasks", json={"prompt": prompt})
                assert r.status_code == 202, r.text
                await hub.wait_idle(SID)
            engine.pacing = pacing_after  # later tasks run slowly enough to be seen mid-run
            yield http
    finally:
        await hub.shutdown()
        await server.stop()


async def get(http: httpx.AsyncClient, query: str = "") -> dict[str, Any]:
    r = await http.get(f"/api/sessions/{SID}/messages{query}")
    assert r.status_code == 200, r.text
    body: dict[str, Any] = orjson.loads(r.content)
    return body


def pos(message: dict[str, Any]) -> str:
    where = message["tracePosition"]
    return f"{where['fileIndex']}:{where['ordinal']}"


def payload_texts(messages: list[dict[str, Any]]) -> list[str]:
    return [m["payload"].get("text", "") for m in messages if m["payload"].get("type") == "text"]


def demo_totals(messages: list[dict[str, Any]], prompt: str) -> tuple[int, int, int]:
    """elapsed, last session total, last request total of the demo task ``prompt``."""
    start = next(i for i, m in enumerate(messages) if m["payload"].get("text") == prompt)
    task = messages[start:]
    end = next((i for i, m in enumerate(task[1:], 1) if m["payload"].get("role") == "user"
                and m["payload"].get("type") == "text"), len(task))  # fmt: skip
    task = task[:end]

    def ms(m: dict[str, Any]) -> int:
        moment = datetime.fromisoformat(m["timestamp"].replace("Z", "+00:00"))
        return int(moment.timestamp() * 1000 + 0.5)

    ends = [ms(m) for m in task if m["payload"].get("type") == "request_end"]
    usages = [m["payload"] for m in task if m["payload"].get("type") == "token_usage"]
    return ends[-1] - ms(task[0]), usages[-1]["session"]["total"], usages[-1]["request"]["total"]


async def test_the_full_read_positions_every_record_exactly(tmp_path: Path) -> None:
    async with session_with_history(tmp_path) as http:
        r = await http.get(f"/api/sessions/{SID}/messages")
        body = orjson.loads(r.content)
        assert list(body) == ["messages"]  # no page envelope without parameters
        shards = sorted((tmp_path / "data" / "traces").glob("*/*.jsonl"))
        lines = [
            (index, ordinal, line)
            for index, shard in enumerate(shards, 1)
            for ordinal, line in enumerate(shard.read_bytes().splitlines())
        ]
        assert len(body["messages"]) == len(lines)
        for message, (index, ordinal, line) in zip(body["messages"], lines, strict=True):
            # tracePosition is the last key; without it the bytes are the trace's.
            assert list(message)[-1] == "tracePosition"
            assert message.pop("tracePosition") == {"fileIndex": index, "ordinal": ordinal}
            assert orjson.dumps(message) == line


async def test_tail_windows_cut_at_whole_tasks_with_prior_totals(tmp_path: Path) -> None:
    async with session_with_history(tmp_path) as http:
        full = (await get(http))["messages"]
        c_elapsed, c_session, c_request = demo_totals(full, "task C")
        d_start = next(m for m in full if m["payload"].get("text") == "task D")
        c_start = next(m for m in full if m["payload"].get("text") == "task C")

        one = await get(http, "?tailLimit=1")
        assert list(one) == ["messages", "page"]
        assert one["messages"][0] == d_start and one["messages"] == full[full.index(d_start) :]
        assert one["page"] == {
            "before": pos(d_start),
            "earlierTurns": 3,
            "prior": {
                "subagentTokens": 0,
                "elapsedMs": 2000 + 4000 + c_elapsed,
                "sessionTokens": c_session,
                "contextTokens": c_request,
            },
        }

        two = await get(http, "?tailLimit=2")
        assert two["messages"][0] == c_start
        assert two["page"]["before"] == pos(c_start)
        assert two["page"]["earlierTurns"] == 2
        # Before C: tasks A and B; B's compaction usage moved the session
        # total (600 at its end) but not the context reading (120).
        assert two["page"]["prior"] == {
            "subagentTokens": 0,
            "elapsedMs": 6000,
            "sessionTokens": 600,
            "contextTokens": 120,
        }

        three = await get(http, "?tailLimit=3")
        assert three["page"]["before"] == "1:13"
        assert three["page"]["earlierTurns"] == 1
        assert three["page"]["prior"] == {
            "subagentTokens": 0,
            "elapsedMs": 2000,
            "sessionTokens": 250,
            "contextTokens": 150,
        }
        # Task B crosses the rotation: its window holds both shards' parts.
        assert {m["tracePosition"]["fileIndex"] for m in three["messages"]} == {1, 2}

        for limit in (4, 5, 1000):
            everything = await get(http, f"?tailLimit={limit}")
            # Reaches the start: the meta is in, and there is no cursor.
            assert everything["messages"] == full
            assert everything["page"] == {
                "earlierTurns": 0,
                "prior": {
                    "subagentTokens": 0,
                    "elapsedMs": 0,
                    "sessionTokens": 0,
                    "contextTokens": 0,
                },
            }


@pytest.mark.parametrize("limit", [1, 2, 3])
async def test_walking_back_with_before_rebuilds_the_history(tmp_path: Path, limit: int) -> None:
    async with session_with_history(tmp_path) as http:
        full = (await get(http))["messages"]
        pages = [await get(http, f"?tailLimit={limit}")]
        while "before" in pages[-1]["page"]:
            pages.append(await get(http, f"?before={pages[-1]['page']['before']}&limit={limit}"))
        assert len(pages) == -(-4 // limit)  # four tasks
        assert [m for page in reversed(pages) for m in page["messages"]] == full
        turns = [page["page"]["earlierTurns"] for page in pages]
        assert turns == sorted(turns, reverse=True) and turns[-1] == 0
        for page in pages:
            assert "live" not in page
            assert_nothing_split(page["messages"])


def assert_nothing_split(messages: list[dict[str, Any]]) -> None:
    """Every pairing a client relies on is whole inside the window."""
    kinds = [m["payload"].get("type") for m in messages]
    calls = {
        m["payload"]["tool_call_id"] for m in messages if m["payload"].get("type") == "tool_call"
    }
    for m in messages:
        if m["payload"].get("type") in ("tool_call_output", "approval_decision"):
            assert m["payload"]["tool_call_id"] in calls, m
    assert kinds.count("compaction_begin") == kinds.count("compaction_end")
    texts = payload_texts(messages)
    if STEERING in texts:
        at = next(i for i, m in enumerate(messages) if m["payload"].get("text") == STEERING)
        assert messages[at + 1]["payload"]["type"] == "image_url"
    # A window opens at a prompt (or at the very start of the history).
    first = messages[0]["payload"]
    assert messages[0]["type"] == "session_meta" or (
        first["type"] == "text" and first["role"] == "user"
    )


async def test_before_windows_end_at_the_cursor(tmp_path: Path) -> None:
    async with session_with_history(tmp_path) as http:
        full = (await get(http))["messages"]
        a = await get(http, "?before=1:13&limit=1")
        assert a["messages"] == full[:13]  # task A, preceded by the meta
        assert a["page"]["earlierTurns"] == 0 and "before" not in a["page"]
        b = await get(http, "?before=2:7")  # default limit 200: everything before C
        assert [pos(m) for m in b["messages"]] == [pos(m) for m in full[: len(b["messages"])]]
        assert payload_texts(b["messages"])[-1] == "The dog is fine."
        # A cursor into a shard that is gone: nothing before it is known.
        gone = await get(http, "?before=9:0&limit=3")
        assert gone == {
            "messages": [],
            "page": {
                "earlierTurns": 0,
                "prior": {
                    "subagentTokens": 0,
                    "elapsedMs": 0,
                    "sessionTokens": 0,
                    "contextTokens": 0,
                },
            },
        }


@pytest.mark.parametrize(
    ("query", "needle"),
    [
        ("?limit=3", "limit"),
        ("?tailLimit=2&before=1:0", "tailLimit and before"),
        ("?tailLimit=2&limit=3", "limit"),
        ("?tailLimit=0", "tailLimit"),
        ("?tailLimit=1001", "tailLimit"),
        ("?tailLimit=-1", "tailLimit"),
        ("?tailLimit=abc", "tailLimit"),
        ("?tailLimit=%EF%BC%91", "tailLimit"),  # a full-width digit one
        ("?tailLimit=", "tailLimit"),
        ("?before=1:0&limit=0", "limit"),
        ("?before=1:0&limit=x", "limit"),
        ("?before=abc", "before"),
        ("?before=1:2:3", "before"),
        ("?before=-1:0", "before"),
        ("?before=", "before"),
    ],
)
async def test_bad_window_parameters_are_refused(tmp_path: Path, query: str, needle: str) -> None:
    async with session_with_history(tmp_path) as http:
        r = await http.get(f"/api/sessions/{SID}/messages{query}")
        assert r.status_code == 400
        error = r.json()["error"]
        assert error["code"] == "invalid_request" and needle in error["message"]


async def test_the_live_tail_rides_tail_windows_only(tmp_path: Path) -> None:
    async with session_with_history(tmp_path, pacing_after=0.05) as http:
        r = await http.post(f"/api/sessions/{SID}/tasks", json={"prompt": "task E"})
        assert r.status_code == 202
        tail: dict[str, Any] = {}
        for _ in range(200):  # until the run has published its first fragment
            tail = await get(http, "?tailLimit=1")
            if "live" in tail:
                break
            await asyncio.sleep(0.02)
        assert list(tail) == ["messages", "live", "page"]
        assert payload_texts(tail["messages"])[0] == "task E"
        older = await get(http, f"?before={tail['page']['before']}&limit=1")
        assert "live" not in older and payload_texts(older["messages"])[0] == "task D"
        await http.post(f"/api/sessions/{SID}/abort", json={})


def test_prompts_of_one_send_form_one_unit() -> None:
    def record(msg: dict[str, Any]) -> Any:
        return message_from_dict(msg)

    shard = [
        record(p.user_text("one")),
        record(p.image_url("https://example.com/1.png")),
        record(p.request_begin()),
        # The process died here: no reply, nothing drawn. The next send
        # joins the same unit, as the reference client draws it.
        record(p.user_text("two")),
        record(p.request_begin()),
        record(p.assistant_text("answer")),
        record(p.request_end("completed")),
        record(p.user_text("three")),
    ]
    records = positioned([(1, shard)])
    page = window(records, 1)
    assert page.before == (1, 7) and page.prior.turns == 1
    page = window(records, 1, (1, 7))
    assert page.before is None and len(page.messages) == 7
    assert window(records, 2).before is None
    assert window([], 3).messages == [] and window([], 3).prior == PriorTotals()


def test_a_compaction_after_the_reply_neither_extends_the_task_nor_fills_the_context() -> None:
    shard = [
        p.user_text("one", timestamp=at(1)),
        p.request_begin(timestamp=at(1.5)),
        p.assistant_text("reply", timestamp=at(2)),
        usage(10, 10, 2.5),
        p.request_end("completed", timestamp=at(3)),
        # A compaction between tasks: its request ends later, its usage is
        # the summary's, and its records are no part of the task's time.
        p.compaction_begin("turns", "summarize", 10, 1, timestamp=at(4)),
        p.request_begin(timestamp=at(4.5)),
        usage(30, 20, 5),
        p.request_end("completed", timestamp=at(6)),
        p.compaction_end("turns", "summarize", "completed", timestamp=at(7)),
        p.user_text("two", timestamp=at(9)),
    ]
    page = window(positioned([(1, [message_from_dict(m) for m in shard])]), 1)
    assert page.before == (1, 10)
    assert page.prior == PriorTotals(turns=1, elapsed_ms=2000, session_tokens=30, context_tokens=10)


@pytest.mark.parametrize(
    "between",
    [
        p.abort_event("aborted by user"),
        p.request_end("failed", error_message="503"),
        p.tool_call("ls", "{}", "call_x"),
        p.thinking("hmm"),
        p.assistant_text("partial answer"),
        p.user_text(STEERING),
    ],
)
def test_anything_drawn_between_two_prompts_separates_their_units(between: dict[str, Any]) -> None:
    shard = [p.user_text("one"), p.request_begin(), between, p.user_text("two")]
    records = positioned([(1, [message_from_dict(m) for m in shard])])
    assert window(records, 1).before == (1, 3)


@pytest.mark.parametrize(
    "between",
    [p.request_begin(), p.approval_decision("allow", "c"), p.assistant_text("  "), p.thinking("")],
)
def test_nothing_drawn_between_two_prompts_keeps_one_unit(between: dict[str, Any]) -> None:
    shard = [p.user_text("one"), between, p.user_text("two")]
    records = positioned([(1, [message_from_dict(m) for m in shard])])
    assert window(records, 1).before is None
