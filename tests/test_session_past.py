"""What an engine reads of a session's past: folded from its trace one record
at a time, the run's own input (its last records) left out."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from omni_grpc import protocol
from omni_grpc.convert import message_from_dict
from omni_grpc.engines.base import AbortSignal, Decision, JsonObject, RunOptions
from omni_grpc.engines.session_past import past_of, session_past
from omni_grpc.runtime.trace_store import ShardedTrace, all_but_last
from omni_grpc.trace import write_jsonl


@given(st.lists(st.integers(), max_size=30), st.integers(0, 35))
def test_all_but_last_is_the_slice_and_holds_no_more_than_it_leaves_out(
    items: list[int], count: int
) -> None:
    taken = 0
    most_ahead = 0

    def source() -> Iterator[int]:
        nonlocal taken
        for item in items:
            taken += 1
            yield item

    out = []
    for item in all_but_last(source(), count):
        out.append(item)
        most_ahead = max(most_ahead, taken - len(out))
    assert out == items[: max(0, len(items) - count)]
    assert most_ahead <= count


class _Trace:
    """A trace view that counts what it hands out, and refuses the whole list."""

    def __init__(self, messages: list[JsonObject]) -> None:
        self._messages = messages
        self.handed = 0

    @property
    def location(self) -> Path | None:
        return None

    def messages(self) -> list[JsonObject]:
        raise AssertionError("the past is folded one record at a time")

    def iter_messages(self, *, skip_last: int = 0) -> Iterator[JsonObject]:
        for message in self._messages[: max(0, len(self._messages) - skip_last)]:
            self.handed += 1
            yield message


async def _no_approval(_call: JsonObject) -> Decision:
    raise AssertionError("not asked")


def test_the_run_input_is_not_the_past() -> None:
    earlier = [
        protocol.tool_list_ready([]),
        protocol.user_text("first"),
        protocol.tool_call("list_workspace", "{}", "call_demo_4"),
    ]
    now = [protocol.user_text("again"), protocol.tool_call("x", "{}", "call_demo_9")]
    trace = _Trace(earlier + now)
    options = RunOptions("s", _no_approval, AbortSignal(), trace=trace)
    past = session_past(options, len(now))
    assert past == past_of(earlier)
    assert past.tools_listed and past.next_number("call_demo_") == 5
    assert trace.handed == len(earlier)  # the input is never converted


def test_a_sharded_trace_leaves_out_its_last_records_across_shards(tmp_path: Path) -> None:
    texts = [f"record {n}" for n in range(5)]
    shards = [tmp_path / "s_001.jsonl", tmp_path / "s_002.jsonl"]
    with shards[0].open("wb") as first, shards[1].open("wb") as second:
        write_jsonl([message_from_dict(protocol.user_text(t)) for t in texts[:3]], first)
        write_jsonl([message_from_dict(protocol.user_text(t)) for t in texts[3:]], second)
    trace = ShardedTrace(shards)
    whole = trace.messages()
    assert [m["payload"]["text"] for m in whole] == texts
    for skip in range(len(texts) + 2):
        assert list(trace.iter_messages(skip_last=skip)) == whole[: max(0, len(texts) - skip)]
