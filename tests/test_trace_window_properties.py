"""History windows over generated sessions: whatever the shape, nothing splits.

Sessions are drawn from the record shapes a reference trace holds: prompts
with images, replies and thoughts, tool calls whose outputs may land after the
request ended, approvals, retried requests, aborts, steering blocks with their
images, and compactions that may rotate the trace into a new shard.
"""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from omni_grpc import protocol as p
from omni_grpc.convert import message_from_dict
from omni_grpc.trace.window import Position, positioned, window
from omni_grpc_proto.omni.v1 import omni_pb2

STEERING = "[user_steering]\nsteer\n[/user_steering]"
Json = dict[str, Any]


def counts(n: int) -> Json:
    return {"cache_read": 0, "cache_write": n, "output": 0, "total": n}


@st.composite
def items(draw: st.DrawFn, task: int, index: int) -> list[Json]:
    tag = f"{task}_{index}"
    kind = draw(
        st.sampled_from(["reply", "think", "tool", "late_tool", "steer", "retry", "abort", "usage"])
    )
    if kind == "reply":
        return [p.request_begin(), p.assistant_text(f"reply {tag}"), p.request_end("completed")]
    if kind == "think":
        return [p.thinking(draw(st.sampled_from(["", "hmm"])))]
    if kind in ("tool", "late_tool"):
        call = p.tool_call("ls", "{}", f"call_{tag}")
        output = p.tool_call_output("out", f"call_{tag}")
        decision = p.approval_decision("allow", f"call_{tag}")
        if kind == "tool":
            return [p.request_begin(), call, decision, output, p.request_end("completed")]
        return [p.request_begin(), call, decision, p.request_end("completed"), output]
    if kind == "steer":
        images = draw(st.integers(0, 2))
        return [p.user_text(STEERING)] + [
            p.image_url(f"https://x/{tag}_{i}") for i in range(images)
        ]
    if kind == "retry":
        return [p.request_begin(), p.request_end("failed", error_message="503")]
    if kind == "abort":
        return [p.abort_event("aborted by user")]
    n = draw(st.integers(1, 500))
    return [p.token_usage(counts(n), counts(n))]


COMPACTION = "compaction"
ROTATE = "rotate"


@st.composite
def sessions(draw: st.DrawFn) -> list[tuple[int, list[omni_pb2.OmniMessage]]]:
    meta = p.session_meta(p.session_meta_payload("s", "x", "y", 1, "", "", "/w"))
    shards: list[list[Json]] = [[meta]]
    for task in range(draw(st.integers(0, 7))):
        prompts = [p.user_text(f"prompt {task}")]
        prompts += [p.image_url(f"https://x/p{task}_{i}") for i in range(draw(st.integers(0, 2)))]
        shards[-1] += prompts
        for index in range(draw(st.integers(0, 4))):
            if draw(st.integers(0, 5)) == 0:
                shards[-1] += [
                    p.compaction_begin("context", "summarize", 1, 1),
                    p.request_begin(),
                    p.assistant_text("summary"),
                    p.token_usage(counts(9), counts(9)),
                    p.request_end("completed"),
                    p.compaction_end("context", "summarize", "completed"),
                ]
                if draw(st.booleans()):
                    shards.append([meta, p.user_text("[context_summary]\nsummary")])
            else:
                shards[-1] += draw(items(task, index))
    return [(i + 1, [message_from_dict(m) for m in shard]) for i, shard in enumerate(shards)]


def payload(msg: omni_pb2.OmniMessage) -> tuple[str, Any]:
    kind = msg.WhichOneof("payload") or ""
    return kind, getattr(msg, kind)


def is_prompt(msg: omni_pb2.OmniMessage) -> bool:
    kind, body = payload(msg)
    if kind == "image_url":
        return True
    return (
        kind == "text"
        and body.role == omni_pb2.ROLE_USER
        and body.text != STEERING
        and not body.text.startswith("[context_summary]")
    )


def assert_whole(records: list[tuple[Position, omni_pb2.OmniMessage]]) -> None:
    msgs = [m for _, m in records]
    calls = {body.tool_call_id for kind, body in map(payload, msgs) if kind == "tool_call"}
    depth = 0
    for msg in msgs:
        kind, body = payload(msg)
        if kind in ("tool_call_output", "approval_decision"):
            assert body.tool_call_id in calls
        elif kind == "compaction_begin":
            depth += 1
        elif kind == "compaction_end":
            depth -= 1
            assert depth == 0
    assert depth == 0


@settings(max_examples=300, deadline=None)
@given(sessions(), st.integers(1, 4))
def test_walking_back_covers_the_history_and_splits_nothing(
    shards: list[tuple[int, list[omni_pb2.OmniMessage]]], limit: int
) -> None:
    records = positioned(shards)
    pages = [window(records, limit)]
    while pages[-1].before is not None:
        pages.append(window(records, limit, pages[-1].before))
        assert len(pages) <= len(records) + 1
    assert [r for page in reversed(pages) for r in page.messages] == records
    turns = [page.prior.turns for page in pages]
    assert turns[-1] == 0 and turns == sorted(turns, reverse=True)
    for newer, older in itertools.pairwise(pages):
        # Each window starts at a prompt, right where the older one ended.
        assert newer.before is not None and is_prompt(newer.messages[0][1])
        assert older.messages[-1][0] < newer.before == newer.messages[0][0]
        assert 0 < newer.prior.turns - older.prior.turns <= limit
    for page in pages:
        assert_whole(page.messages)
        # A steering block's images never open a window: walking back over
        # images from a window's start never meets a steering block.
        if page.before is not None:
            index = records.index(page.messages[0])
            while payload(records[index][1])[0] == "image_url":
                index -= 1
            kind, body = payload(records[index][1])
            assert not (kind == "text" and body.text == STEERING)
    assert pages[-1].messages[:1] == records[:1]  # the oldest starts at the meta
